"""One planning call: sizes by dynamic program, then placement, then restore sources."""

from __future__ import annotations

from trainmedic.recovery.planner.objective import objectives
from trainmedic.recovery.planner.placement import place
from trainmedic.recovery.planner.restore import restore_sources
from trainmedic.recovery.planner.solve import solve
from trainmedic.recovery.planner.topology import Topology
from trainmedic.schemas.plan import PlanRequest, RecoveryPlan


def plan(request: PlanRequest) -> RecoveryPlan:
    """The plan that maximizes Σ G over the healthy nodes (PLANNER.md), with its nodes."""
    jobs = objectives(request)
    budget = sum(node.healthy for node in request.nodes)
    chosen = solve(jobs, budget)
    sizes = {job.id: size for job, size in zip(request.jobs, chosen, strict=True)}
    topology = Topology(request.nodes)
    allocations = place(request, sizes, topology)
    for i, (job, objective) in enumerate(zip(request.jobs, jobs, strict=True)):
        got = allocations[job.id]
        if len(got) < sizes[job.id]:  # pools left it short: the largest size its nodes allow
            fit = max(size for size in objective.sizes if size <= len(got))
            allocations[job.id], sizes[job.id], chosen[i] = got[:fit], fit, fit
    return RecoveryPlan(
        allocations=allocations,
        sizes=sizes,
        waf=sum(job.value(x) for job, x in zip(jobs, chosen, strict=True)),
        objective=sum(job.gain(x) for job, x in zip(jobs, chosen, strict=True)),
        restore=restore_sources(request, allocations, topology),
    )
