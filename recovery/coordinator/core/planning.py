"""SEV1: the planner's request built from the cluster model, and the horizon it plans for."""

from __future__ import annotations

from functools import lru_cache

from trainmedic.recovery.coordinator.core.lifecycle import offered
from trainmedic.recovery.coordinator.core.state import ClusterState
from trainmedic.schemas.plan import ClusterNode, PlannedJob, PlanRequest


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
    in submission order but those ended or being stopped, horizon = MTBF.

    Built without validation: the state holds each node and job once, a job's nodes are known nodes
    and no node runs two jobs, and a job's throughput passed the planner's bounds when it was
    submitted (`job_bounds.py`), so the request is valid by construction (test_planning checks that
    it equals the validated one). `trainmedic plan` validates the requests people write.
    """
    pool = offered(state)
    nodes = tuple(
        cluster_node(node.id, node.id in pool and node.id not in isolating, node.switch, node.gpus)
        for node in map(state.nodes.__getitem__, sorted(state.nodes))
    )
    jobs = tuple(
        PlannedJob.model_construct(id=job.spec.id, weight=job.spec.weight,
                                   throughput=dict(job.spec.throughput), current=job.nodes,
                                   transition_s=job.spec.transition_s, pool=job.spec.pool)
        for job in state.jobs.values() if not job.over
    )
    return PlanRequest.model_construct(nodes=nodes, jobs=jobs, horizon_s=estimate_mtbf(state, now),
                                       transition_s=state.config.transition_s)


@lru_cache(maxsize=1 << 18)
def cluster_node(node_id: str, healthy: bool, switch: str | None, gpus: int) -> ClusterNode:
    """One node as the planner sees it. The model is frozen and a function of these four values, so
    each is validated once and shared by every request after: at 12,500 nodes, validating them all
    took most of a decision."""
    return ClusterNode(id=node_id, healthy=healthy, switch=switch, gpus=gpus)
