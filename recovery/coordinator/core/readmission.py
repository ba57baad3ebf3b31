"""Automatic re-admission: an isolated node rejoins the pool once it has earned it (its incident
resolved, a quiet probation, few isolations lately) (docs/coordinator.md, "Node lifecycle").
"""

from __future__ import annotations

from trainmedic.recovery.coordinator.core.state import ClusterState, Node
from trainmedic.schemas.incident import IncidentStatus
from trainmedic.schemas.nodes import NodeReadmitted


def readmissions(state: ClusterState, now: float) -> list[NodeReadmitted]:
    """The re-admissions due at `now`, one per node, in node order. An incident naming the node
    that is still open keeps it out, unless it was opened before the node's last uncordon or
    re-admission, which vouched for it (the coordinator's own escalations are never resolved)."""
    config = state.config
    if config.readmission == "off":
        return []
    # Only isolated nodes whose fault is resolved and whose isolation is older than the probation
    # are worth a look through the incidents (a tick must stay cheap on a long log and a large
    # cluster: the fold keeps the isolated nodes' ids).
    isolated = {node.id: node for node in map(state.nodes.__getitem__, state.isolated)
                if now - node.isolated_ts >= config.readmit_probation_s
                and (cause := state.incidents.get(node.isolated_by)) is not None
                and cause.status is IncidentStatus.RESOLVED}
    if not isolated:
        return []
    last_seen: dict[str, float] = {}
    still_open: set[str] = set()
    for incident in state.incidents.values():
        if incident.node in isolated:
            came = state.received(incident)  # not its ts: probation runs on the coordinator's clock
            last_seen[incident.node] = max(last_seen.get(incident.node, 0.0), came)
            returned = isolated[incident.node].returned_ts
            if incident.status is IncidentStatus.OPEN and (returned is None or came > returned):
                still_open.add(incident.node)  # one older than the node's last return was vouched for
    out = []
    for node_id in sorted(isolated):
        node = isolated[node_id]
        if node_id in still_open:
            continue
        reason = _earned(state, node, last_seen.get(node_id, 0.0), now)
        if reason is not None:
            out.append(NodeReadmitted(ts=now, node=node_id, incident_id=node.isolated_by, reason=reason))
    return out


def _earned(state: ClusterState, node: Node, last_seen: float, now: float) -> str | None:
    """Why the node may come back, or None while it may not."""
    config = state.config
    cause = state.incidents.get(node.isolated_by)
    if cause is None or cause.status is not IncidentStatus.RESOLVED:
        return None
    clean_since = max(last_seen, node.isolated_ts)
    if now - clean_since < config.readmit_probation_s:
        return None
    failures = sum(1 for ts, _ in node.isolations if ts > now - config.readmit_window_s)
    if failures > config.readmit_max_failures:
        return None
    return (f"incident {cause.id} ({cause.category}) resolved; clean for {now - clean_since:.0f} s "
            f"(probation {config.readmit_probation_s:g} s); isolated {failures} time(s) in the last "
            f"{config.readmit_window_s:g} s (limit {config.readmit_max_failures})")


def outlook(state: ClusterState, node: Node, now: float) -> str:
    """When an isolated node comes back by itself, in words (for `trainmedic nodes list`)."""
    config = state.config
    if config.readmission == "off":
        return "re-admission off: uncordon it"
    failures = sum(1 for ts, _ in node.isolations if ts > now - config.readmit_window_s)
    if failures > config.readmit_max_failures:
        return (f"isolated {failures} times in {config.readmit_window_s:g} s: a person decides "
                f"(uncordon it)")
    cause = state.incidents.get(node.isolated_by)
    if cause is None or cause.status is not IncidentStatus.RESOLVED:
        return f"back {config.readmit_probation_s:g} s after its incident resolves"
    return f"back once clean for {config.readmit_probation_s:g} s"
