"""SEV1: the planner's request built from the cluster model, and the horizon it plans for."""

from __future__ import annotations

from recovery.coordinator.lifecycle import offered
from recovery.coordinator.state import ClusterState
from schemas.plan import ClusterNode, PlannedJob, PlanRequest


def estimate_mtbf(state: ClusterState, now: float) -> float:
    """Mean time between failures: observed time over SEV1+SEV2 incidents, with a prior.

    The prior counts as `mtbf_prior_weight` failures `mtbf_prior_s` apart, so a young
    cluster plans for the prior and a long history outweighs it:
    (prior_s · weight + observed_s) / (weight + failures).
    """
    config = state.config
    observed_s = 0.0 if state.first_ts is None else max(0.0, now - state.first_ts)
    return (config.mtbf_prior_s * config.mtbf_prior_weight + observed_s) / (
        config.mtbf_prior_weight + len(state.failures))


def plan_request(state: ClusterState, now: float, isolating: frozenset[str] = frozenset()) -> PlanRequest:
    """Every known node with its health (`isolating`: nodes this decision takes out; cordoned, drained
    and held nodes count as unhealthy except to the job on them, `lifecycle.offered`), every job
    in submission order but those ended or being stopped, horizon = MTBF."""
    pool = offered(state)
    nodes = tuple(
        ClusterNode(id=node.id, healthy=node.id in pool and node.id not in isolating, switch=node.switch,
                    gpus=node.gpus)
        for node in sorted(state.nodes.values(), key=lambda n: n.id)
    )
    jobs = tuple(
        PlannedJob(id=job.spec.id, weight=job.spec.weight, throughput=dict(job.spec.throughput),
                   current=job.nodes, transition_s=job.spec.transition_s)
        for job in state.jobs.values() if not job.over
    )
    return PlanRequest(nodes=nodes, jobs=jobs, horizon_s=estimate_mtbf(state, now),
                       transition_s=state.config.transition_s)
