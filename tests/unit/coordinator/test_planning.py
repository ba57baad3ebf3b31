"""The planner's request as the coordinator builds it fast equals the validated one, on random clusters."""

from hypothesis import given, settings
from hypothesis import strategies as st

from trainmedic.recovery.coordinator.core import ClusterState, CoordinatorConfig, NodeConfig, apply, react
from trainmedic.recovery.coordinator.core.lifecycle import new_work_refused, offered
from trainmedic.recovery.coordinator.core.planning import plan_request
from trainmedic.recovery.planner.plan import plan
from trainmedic.schemas import Incident, JobSpec, JobSubmitted, NodeLeaving
from trainmedic.schemas.nodes import NodeCordoned, NodeDrained
from trainmedic.schemas.plan import ClusterNode, PlannedJob, PlanRequest
from trainmedic.schemas.recovery import RecoverySkipped


@st.composite
def clusters(draw):
    """Up to 40 nodes on a few leaves or the spine, jobs on disjoint nodes, and nodes isolated,
    cordoned, drained, leaving or held by an open SEV1 incident."""
    count = draw(st.integers(1, 40))
    leaves = draw(st.lists(st.sampled_from([None, "leaf-a", "leaf-b", "leaf-c"]), min_size=count,
                           max_size=count))
    names = [f"n{i:02d}" for i in range(count)]
    config = CoordinatorConfig(nodes=tuple(NodeConfig(id=n, switch=s, gpus=draw(st.sampled_from([4, 8])))
                                           for n, s in zip(names, leaves, strict=True)))
    state = ClusterState.initial(config)
    free = list(draw(st.permutations(names)))
    for j in range(draw(st.integers(0, 4))):
        size = draw(st.integers(1, max(1, len(free) // 2)))
        if len(free) < size:
            break
        nodes, free = tuple(free[:size]), free[size:]
        sizes = draw(st.sets(st.integers(1, count), max_size=4)) | {size}
        spec = JobSpec(id=f"job-{j}", nodes=nodes, command=("train",),
                       weight=draw(st.sampled_from([1.0, 2.5, 1000.0])),
                       transition_s=draw(st.sampled_from([None, 0.0, 90.0])),
                       throughput={s: draw(st.floats(0, 1e15 * s)) for s in sorted(sizes)})
        react(state, JobSubmitted(ts=1.0, job=spec), 1.0)
    for name in draw(st.lists(st.sampled_from(names), max_size=12)):
        match draw(st.sampled_from(["isolated", "cordoned", "drained", "leaving", "held"])):
            case "isolated":
                apply(state, RecoverySkipped(ts=2.0, incident_id=f"i-{name}", reason="t",
                                             isolated={name: f"i-{name}"}))
            case "cordoned":
                apply(state, NodeCordoned(ts=2.0, node=name))
            case "drained":
                apply(state, NodeDrained(ts=2.0, node=name))
            case "leaving":
                apply(state, NodeLeaving(ts=2.0, node=name))
            case "held":
                apply(state, Incident(ts=2.0, id=f"h-{name}", status="open", category="gpu_lost",
                                      severity="SEV1", action="reconfigure", node=name, first_ts=2.0))
    isolating = frozenset(draw(st.lists(st.sampled_from(names), max_size=3)))
    return state, isolating


def validated(state: ClusterState, now: float, isolating: frozenset[str]) -> PlanRequest:
    """The request built the way it was before the fast path: every model validated, and `offered`
    spelled with `new_work_refused`."""
    running = {node for job in state.jobs.values() for node in job.nodes}
    pool = {node.id for node in state.nodes.values() if node.healthy and node.mode != "draining"
            and not node.leaving and (node.id in running or new_work_refused(state, node.id) is None)}
    return PlanRequest(
        nodes=tuple(ClusterNode(id=n.id, healthy=n.id in pool and n.id not in isolating, switch=n.switch,
                                gpus=n.gpus) for n in sorted(state.nodes.values(), key=lambda n: n.id)),
        jobs=tuple(PlannedJob(id=job.spec.id, weight=job.spec.weight, throughput=dict(job.spec.throughput),
                              current=job.nodes, transition_s=job.spec.transition_s)
                   for job in state.jobs.values() if not job.over),
        horizon_s=plan_request(state, now).horizon_s, transition_s=state.config.transition_s)


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_the_fast_request_and_its_plan_equal_the_validated_ones(cluster):
    state, isolating = cluster
    fast, slow = plan_request(state, 10.0, isolating), validated(state, 10.0, isolating)
    assert fast == slow
    assert fast.model_dump() == slow.model_dump()
    assert plan(fast) == plan(slow)


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_offered_reads_the_fields_as_new_work_refused_does(cluster):
    state, _ = cluster
    running = {node for job in state.jobs.values() for node in job.nodes}
    assert offered(state) == {node.id for node in state.nodes.values()
                              if node.healthy and node.mode != "draining" and not node.leaving
                              and (node.id in running or new_work_refused(state, node.id) is None)}
