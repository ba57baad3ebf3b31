"""SEV1s that blame nodes: grouped within `group_window_s`, capped (past the cap one `mass_failure`
incident asks a person), then one re-plan for all of them (docs/coordinator.md, "Blast-radius limits and
blame").
"""

from __future__ import annotations

from trainmedic.recovery.coordinator.core.blame import blames_node
from trainmedic.recovery.coordinator.core.commands import (
    commands_for,
    digest,
    incident_plan_id,
    planned_restore,
)
from trainmedic.recovery.coordinator.core.limits import isolation_cap, isolations_left
from trainmedic.recovery.coordinator.core.planning import plan_request
from trainmedic.recovery.coordinator.core.state import ClusterState
from trainmedic.schemas.incident import Action, Incident, IncidentStatus, Severity
from trainmedic.schemas.recovery import RecoveryKind, RecoveryPlanned, RecoverySkipped


def skip(incident: Incident, now: float, reason: str, job: str | None = None,
         isolated: dict[str, str] | None = None) -> RecoverySkipped:
    """A decision not to act on `incident`, and why (`isolated`: the nodes it still takes out)."""
    return RecoverySkipped(ts=now, incident_id=incident.id, job=job or incident.job, node=incident.node,
                           reason=reason, isolated=isolated or {})


def node_group(state: ClusterState) -> list[Incident]:
    """The open SEV1 incidents that blame a node and wait for a decision, oldest first."""
    waiting = (state.incidents[i] for i in state.pending)
    return sorted((i for i in waiting if blames_node(state, i)), key=lambda i: (i.ts, i.id))


def group_due(state: ClusterState) -> float | None:
    """When the waiting node SEV1s are decided: `group_window_s` after the first of them arrived, by
    the coordinator's clock (`ClusterState.received`: an incident's `ts` is the detector's time of a
    node's telemetry, another host's clock, and a node a second or two behind would have its faults
    decided alone, or late; issue 44). None when none waits."""
    group = node_group(state)
    return min(map(state.received, group)) + state.config.group_window_s if group else None


def decide_isolations(state: ClusterState, now: float) -> list:
    """Once the node SEV1s are due (`group_due`): isolate what the cap allows, re-plan once, hold the
    rest."""
    due = group_due(state)
    if due is None or due > now:
        return []
    group = node_group(state)
    out: list = []
    isolate: dict[str, str] = {}
    held: list[Incident] = []
    left = isolations_left(state, now)
    for incident in group:
        node = state.nodes[incident.node]
        if not node.healthy or incident.node in isolate:
            by = node.isolated_by or isolate[incident.node]
            out.append(skip(incident, now, f"node {incident.node} is already isolated (incident {by})"))
        elif len(isolate) < left:
            isolate[incident.node] = incident.id
        else:
            held.append(incident)
    if isolate:
        out += _replan(state, [i for i in group if isolate.get(i.node) == i.id], isolate, now)
    if held:
        out += _hold(state, held, now)
    return out


def _replan(state: ClusterState, incidents: list[Incident], isolate: dict[str, str], now: float) -> list:
    from trainmedic.recovery.planner.plan import plan as solve

    first = incidents[0]
    request = plan_request(state, now, frozenset(isolate))
    result = solve(request)
    plan_id = incident_plan_id(first.id)
    out: list = []
    for job in state.jobs.values():
        nodes = result.allocations.get(job.spec.id, ())
        if nodes == job.nodes or job.over:  # a job being stopped keeps its stop plan
            continue
        restore = planned_restore(nodes, result.restore)
        plan = RecoveryPlanned(
            ts=now, plan_id=plan_id, incident_id=first.id, job=job.spec.id, kind=RecoveryKind.RECONFIGURE,
            generation=0 if job.generation is None else job.generation + 1, nodes=nodes, previous=job.nodes,
            restore=restore, horizon_s=request.horizon_s, isolated=isolate,
        )
        out += [plan, *commands_for(state, plan, now)]
    nodes = ("node " if len(isolate) == 1 else "nodes ") + " ".join(sorted(isolate))
    if not out:
        out.append(skip(first, now, f"{nodes} isolated; no job needed new nodes", isolated=isolate))
    out += [skip(i, now, f"planned together with incident {first.id} (plan {plan_id}): {nodes} isolated")
            for i in incidents[1:]]
    return out


def _hold(state: ClusterState, held: list[Incident], now: float) -> list:
    """Past the cap: no isolation, no plan; one `mass_failure` per window for a person."""
    config = state.config
    window = f"{config.isolation_window_s:g} s"
    since = now - config.isolation_window_s
    raised = [i for i in state.incidents.values() if i.category == "mass_failure"
              and i.status is IncidentStatus.OPEN and i.ts > since]
    alert = raised[0] if raised else Incident(
        ts=now, id=f"mass-{digest('mass_failure', held[0].id)}", status=IncidentStatus.OPEN,
        category="mass_failure", severity=Severity.SEV1, action=Action.ALERT, first_ts=held[0].first_ts,
        evidence=(f"{len(held)} node fault(s) beyond the isolation cap of {isolation_cap(state)} node(s) "
                  f"per {window}: " + ", ".join(f"{i.node} ({i.category}, {i.id})" for i in held),
                  "the coordinator stopped isolating: these nodes stay in service and their jobs keep "
                  "their nodes; a person decides"),
    )
    out: list = [] if raised else [alert]
    out += [skip(i, now, f"isolation cap reached ({isolation_cap(state)} node(s) per {window}): node "
                         f"{i.node} stays in service and its job keeps its nodes; a person decides "
                         f"(incident {alert.id})") for i in held]
    return out
