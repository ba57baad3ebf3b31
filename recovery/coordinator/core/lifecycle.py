"""Nodes leave and rejoin the pool: the fold of cordon, drain, uncordon and re-admission (ordered by
time, not arrival), of a node's own leave and join, and what a node's state means for new work
(docs/coordinator.md, "Node lifecycle").
"""

from __future__ import annotations

import logging

from trainmedic.recovery.coordinator.core.blame import NODE_SUSPECT, blames_node
from trainmedic.recovery.coordinator.core.state import ClusterState, Node, NodeMode
from trainmedic.schemas.commands import NodeJoined, NodeLeaving
from trainmedic.schemas.incident import IncidentStatus
from trainmedic.schemas.nodes import NodeCordoned, NodeDrained, NodeReadmitted, NodeUncordoned

log = logging.getLogger(__name__)

NodeEventT = NodeCordoned | NodeDrained | NodeUncordoned | NodeReadmitted
_MODES = {"node_cordoned": NodeMode.CORDONED, "node_drained": NodeMode.DRAINING,
          "node_uncordoned": NodeMode.READY}
# Two operator events at the same instant: the more cautious one wins, whatever the order read.
_CAUTION = {NodeMode.READY: 0, NodeMode.CORDONED: 1, NodeMode.DRAINING: 2}


def apply_node_event(state: ClusterState, event: NodeEventT) -> None:
    """Fold one node lifecycle event (idempotent, order-free as the module says). An event for a node
    outside the cluster (config or enrollment) is ignored: an uncordon must not invent a spare."""
    if _foreign(state, event):
        return
    node = state.node(event.node)
    if isinstance(event, NodeUncordoned | NodeReadmitted):
        _returned(state, node, event.ts)
    if event.type in _MODES:
        mode = _MODES[event.type]
        if node.mode_ts is None or (event.ts, _CAUTION[mode]) > (node.mode_ts, _CAUTION[node.mode]):
            node.mode, node.mode_ts, node.mode_reason = mode, event.ts, event.reason
    if not isinstance(event, NodeCordoned):  # a cordon changes nothing that runs
        capacity_changed(state, event.ts)


def apply_node_report(state: ClusterState, event: NodeJoined | NodeLeaving) -> None:
    """Fold a node's own leave or join (idempotent, order-free: the later of the two holds). A leave
    re-plans like a drain; a join re-plans only when it ends a leave."""
    if _foreign(state, event):
        return
    node = state.node(event.node)
    was_leaving, was_admitted = node.leaving, node.admitted
    if isinstance(event, NodeLeaving):
        if node.left_ts is None or event.ts > node.left_ts:
            node.left_ts, node.left_reason = event.ts, event.reason
    elif node.joined_ts is None or event.ts > node.joined_ts:
        node.joined_ts = event.ts
    # a join that ended a leave (the leave read first, or after the join): the node came back, which
    # vouches for it (health.vouched_by); an executor that restarts without a leave does not
    ended = (isinstance(event, NodeJoined) and was_leaving and not node.leaving) or (
        isinstance(event, NodeLeaving) and event.ts == node.left_ts and not node.leaving)
    if ended:
        rejoined = node.rejoined_ts
        node.rejoined_ts = node.joined_ts if rejoined is None else max(rejoined, node.joined_ts)
    if node.leaving != was_leaving or node.admitted != was_admitted:  # an enrolled node's first join
        capacity_changed(state, event.ts)


def _foreign(state: ClusterState, event: NodeEventT | NodeJoined | NodeLeaving) -> bool:
    if not state.in_cluster(event.node):
        log.warning("%s for node %s, which the cluster configuration does not list and which did not "
                    "enroll: ignored", event.type, event.node)
        return True
    return False


def capacity_changed(state: ClusterState, ts: float) -> None:
    state.capacity_ts = ts if state.capacity_ts is None else max(state.capacity_ts, ts)


def _returned(state: ClusterState, node: Node, ts: float) -> None:
    node.returned_ts = ts if node.returned_ts is None else max(node.returned_ts, ts)
    if node.isolated_ts is not None and node.isolated_ts <= node.returned_ts:
        node.isolated_by = node.isolated_ts = None
        state.isolated.discard(node.id)


def isolated(state: ClusterState, node: Node, incident_id: str, ts: float) -> None:
    """A decision isolated `node` at `ts`: it counts as a failure of the node, and takes the node
    out unless the node returned after it. The latest isolation is the one that holds."""
    if (ts, incident_id) not in node.isolations:
        node.isolations = tuple(sorted((*node.isolations, (ts, incident_id))))
    if node.returned_ts is not None and ts <= node.returned_ts:
        return
    if node.isolated_ts is None or (ts, incident_id) > (node.isolated_ts, node.isolated_by or ""):
        node.isolated_by, node.isolated_ts = incident_id, ts
        state.isolated.add(node.id)


def capacity_decided(state: ClusterState, ts: float) -> None:
    """A re-plan for the latest capacity change was decided at `ts`."""
    done = state.capacity_decided_ts
    state.capacity_decided_ts = ts if done is None else max(done, ts)


def suspects(state: ClusterState) -> dict[str, str]:
    """Node -> an open incident that holds it: a SEV1 that blames it but did not isolate it (held past
    the cap, or waiting for its group), or the coordinator's `node_suspect` while its health check is
    out: such a node keeps its job but takes no new work. A job's failure alone holds no node: what
    jobs report is about the jobs (`blame.blames_node`). An uncordon or re-admission later than the
    incident vouches for the node."""
    out: dict[str, str] = {}
    for incident in state.incidents.values():
        if (incident.node is not None and incident.status is IncidentStatus.OPEN
                and (incident.category == NODE_SUSPECT or blames_node(state, incident))):
            returned = state.nodes[incident.node].returned_ts if incident.node in state.nodes else None
            if returned is None or state.received(incident) > returned:
                out.setdefault(incident.node, incident.id)
    return out


def status(state: ClusterState, node_id: str) -> str:
    """ready, cordoned, draining, drained (draining and empty), leaving, left (leaving and empty),
    removed, registered (enrolled, its executor not joined since) or isolated: what `nodes list` shows."""
    node = state.nodes[node_id]
    if node.removed:
        return "removed"
    if not node.healthy:
        return "isolated"
    if node.mode is NodeMode.DRAINING:
        return "draining" if state.job_on(node_id) else "drained"
    if node.leaving:
        return "leaving" if state.job_on(node_id) else "left"
    if not node.admitted:
        return "registered"
    return node.mode.value


def new_work_refused(state: ClusterState, node_id: str, held: dict[str, str] | None = None) -> str | None:
    """Why the node may take no new ranks, or None when it may (`held`: `suspects(state)`)."""
    node = state.nodes.get(node_id)
    if node is None:
        return None
    if not node.healthy:
        return f"node {node_id} is isolated (incident {node.isolated_by})"
    if node.mode is not NodeMode.READY:
        return f"node {node_id} is {node.mode}" + (f" ({node.mode_reason})" if node.mode_reason else "")
    if node.removed:
        return f"node {node_id} was removed" + (f" ({node.removed_reason})" if node.removed_reason else "")
    if node.leaving:
        return f"node {node_id} is leaving" + (f" ({node.left_reason})" if node.left_reason else "")
    if not node.admitted:
        return f"node {node_id} registered, but its executor has not joined since"
    incident = (suspects(state) if held is None else held).get(node_id)
    return None if incident is None else f"node {node_id} has open SEV1 incident {incident}"


def offered(state: ClusterState) -> frozenset[str]:
    """The nodes the planner may count as healthy: ready ones; cordoned or suspect ones only while
    a job runs there, so that job may keep them; never a draining, leaving or isolated one."""
    running = {node for job in state.jobs.values() for node in job.nodes}
    held = suspects(state)
    # A decision at 12,500 nodes cannot afford a call per node, so the fields are read directly:
    # healthy, not draining, not leaving nor removed, admitted; then `new_work_refused`, which for
    # such a node refuses a cordoned or held one.
    return frozenset(
        node.id for node in state.nodes.values()
        if node.isolated_by is None and node.mode is not NodeMode.DRAINING
        and ((node.left_ts is None and node.removed_ts is None) or not node.leaving)
        and (node.registered_ts is None or node.admitted) and node.id in state.members
        and (node.id in running or (node.mode is NodeMode.READY and node.id not in held)))
