"""Nodes left or came back (drain, uncordon, re-admission): once the cluster is quiet, re-plan and move
or grow the jobs the planner's objective says to, Unicron's re-plan on node join (docs/coordinator.md,
"Node lifecycle").
"""

from __future__ import annotations

from trainmedic.recovery.coordinator.core.commands import commands_for, digest, planned_restore
from trainmedic.recovery.coordinator.core.planning import plan_request
from trainmedic.recovery.coordinator.core.state import ClusterState, Job
from trainmedic.schemas.recovery import RecoveryKind, RecoveryPlanned, RecoverySkipped


def capacity_plan_id(job: Job) -> str:
    """One plan per job and generation, however often the coordinator restarts before it is read."""
    return f"plan-{digest('capacity', job.spec.id, job.generation)}"


def capacity_due(state: ClusterState, now: float) -> bool:
    """A node event newer than the last capacity re-plan and not in the future (an operator's clock
    ahead of ours waits until ours gets there), with no plan in flight and no incident waiting."""
    changed, decided = state.capacity_ts, state.capacity_decided_ts
    if changed is None or changed > now or (decided is not None and decided >= changed):
        return False
    return not state.pending and not any(job.state.in_flight for job in state.jobs.values())


def replan_capacity(state: ClusterState, now: float) -> list:
    """The plans (with their commands) for every job whose nodes the planner changes, or one skip."""
    from trainmedic.recovery.planner.plan import plan as solve

    if not capacity_due(state, now):
        return []
    request = plan_request(state, now)
    result = solve(request)
    out: list = []
    for job in state.jobs.values():
        nodes = result.allocations.get(job.spec.id, ())
        if nodes == job.nodes or job.state.in_flight or job.over:
            continue
        restore = planned_restore(nodes, result.restore)
        plan = RecoveryPlanned(
            ts=now, plan_id=capacity_plan_id(job), job=job.spec.id, kind=RecoveryKind.RECONFIGURE,
            generation=0 if job.generation is None else job.generation + 1, nodes=nodes, previous=job.nodes,
            restore=restore, horizon_s=request.horizon_s, isolated={},
        )
        out += [plan, *commands_for(state, plan, now)]
    if not out:
        busy = {node for job in state.jobs.values() for node in job.nodes}
        free = sorted(n.id for n in request.nodes if n.healthy and n.id not in busy)
        out.append(RecoverySkipped(ts=now, reason=(
            f"nodes changed; the planner keeps every job where it is: no change pays for its restart "
            f"within the horizon ({request.horizon_s:.0f} s), or no job can use more nodes"
            f"{' (free: ' + ' '.join(free) + ')' if free else ''}")))
    return out
