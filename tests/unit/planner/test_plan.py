"""plan(): PLANNER.md's example, edge cases, and the rules every plan keeps."""

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.planner.cluster import request
from trainmedic.recovery.planner.objective import objectives
from trainmedic.recovery.planner.plan import plan
from trainmedic.schemas.commands import RestoreSource
from trainmedic.schemas.plan import PlanRequest

LLM_A = {
    "id": "llm-a",
    "throughput": {"4": 1.1e15, "8": 2.1e15, "16": 4.0e15},
    "current": ["n01", "n02", "n03", "n04"],
    "transition_s": 120,
}


def test_planner_md_example():
    req = request(
        {"leaf-1": ["n01", "n02", "n03", "n04"], "leaf-2": ["n05"]},
        [LLM_A], down={"n04"}, horizon_s=10800,
    )
    result = plan(req)
    assert result.allocations == {"llm-a": ("n01", "n02", "n03", "n05")}
    assert result.sizes == {"llm-a": 4}
    assert result.waf == 1.1e15
    assert result.objective == 1.1e15 * 10800 - 1.1e15 * 120
    assert result.restore == {"n05": RestoreSource(kind="replica", node="n01")}


def test_grows_when_nodes_allow_it():
    nodes = {"leaf-1": [f"n{i:02d}" for i in range(1, 9)]}
    result = plan(request(nodes, [LLM_A], horizon_s=10800))
    assert result.sizes == {"llm-a": 8}
    assert result.objective == 2.1e15 * 10800 - 1.1e15 * 120


def test_zero_jobs():
    result = plan(request({"leaf-1": ["a"]}, []))
    assert (result.allocations, result.sizes, result.waf, result.objective) == ({}, {}, 0, 0)


def test_all_nodes_unhealthy_stops_every_job_and_counts_its_cost():
    jobs = [{"id": "j", "throughput": {"2": 3.0}, "current": ["a", "b"], "transition_s": 10}]
    result = plan(request({"leaf-1": ["a", "b"]}, jobs, down={"a", "b"}))
    assert result.allocations == {"j": ()}
    assert (result.waf, result.objective) == (0.0, -30.0)


def test_current_size_missing_from_table_moves_to_a_listed_size():
    jobs = [{"id": "j", "throughput": {"2": 1.0, "4": 3.0}, "current": ["a", "b", "c"]}]
    result = plan(request({"leaf-1": ["a", "b", "c"]}, jobs))
    assert result.sizes == {"j": 2}
    assert result.allocations == {"j": ("a", "b")}


@st.composite
def requests(draw):
    """Up to 12 nodes on 3 switches or the spine, up to 4 jobs owning disjoint nodes."""
    count = draw(st.integers(0, 12))
    names = [f"n{i:02d}" for i in range(count)]
    jobs = draw(st.integers(0, 4))
    owner = [draw(st.sampled_from([None, *range(jobs)])) for _ in names]
    return PlanRequest.model_validate({
        "nodes": [
            {"id": name, "healthy": draw(st.booleans()),
             "switch": draw(st.sampled_from([None, "leaf-1", "leaf-2", "leaf-3"]))}
            for name in names
        ],
        "jobs": [
            {
                "id": f"j{j}",
                "weight": draw(st.sampled_from([0.5, 1, 2])),
                "throughput": draw(st.dictionaries(
                    st.integers(1, 6).map(str), st.floats(0, 1e15), min_size=1, max_size=3,
                )),
                "current": [name for name, o in zip(names, owner, strict=True) if o == j],
                "transition_s": draw(st.sampled_from([0, 60, 600])),
            }
            for j in range(jobs)
        ],
        "horizon_s": draw(st.sampled_from([600, 3600])),
    })


@settings(max_examples=150, deadline=None)
@given(requests())
def test_every_plan_keeps_the_placement_rules(req):
    result = plan(req)
    healthy = {node.id for node in req.nodes if node.healthy}
    used = [node for nodes in result.allocations.values() for node in nodes]
    assert len(used) == len(set(used)), "a node serves two jobs"
    assert set(used) <= healthy, "an unhealthy node serves a job"
    for job in req.jobs:
        mine = result.allocations[job.id]
        size = result.sizes[job.id]
        assert len(mine) == size and size in {0, *job.throughput}
        survivors = [node for node in job.current if node in healthy]
        kept = [node for node in mine if node in job.current]
        assert len(kept) == min(size, len(survivors)), "a usable current node was dropped"
        for node in mine:
            source = result.restore.get(node)
            if node in job.current:
                assert source is None
            elif kept:
                assert source.kind == "replica" and source.node in kept
            else:
                assert source == RestoreSource(kind="checkpoint")
    sizes = [result.sizes[job.id] for job in req.jobs]
    scored = list(zip(objectives(req), sizes, strict=True))
    assert result.waf == sum(job.value(size) for job, size in scored)
    assert result.objective == sum(job.gain(size) for job, size in scored)


def test_a_job_with_a_pool_moves_only_to_its_spares_and_shrinks_when_they_are_gone():
    """A Slurm allocation's job: a lost node is replaced from the job's pool, never from the free nodes
    nearer to it outside the pool; with none of its pool left it shrinks; another job running on a node
    of the pool keeps it."""
    switches = {"leaf-1": ["a1", "a2", "a3", "a4"], "leaf-2": ["b1", "b2"]}
    job = {"id": "slurm", "throughput": {"1": 1.0e14, "2": 2.0e14}, "current": ["a1", "a2"],
           "transition_s": 10, "pool": ["a1", "a2", "b2"]}
    assert plan(request(switches, [job], down={"a2"})).allocations == {"slurm": ("a1", "b2")}
    unpooled = {**job, "pool": None}
    assert plan(request(switches, [unpooled], down={"a2"})).allocations == {"slurm": ("a1", "a3")}
    assert plan(request(switches, [job], down={"a2", "b2"})).allocations == {"slurm": ("a1",)}
    other = {"id": "other", "throughput": {"1": 5.0e14}, "current": ["b2"], "transition_s": 10}
    result = plan(request(switches, [other, job], down={"a2"}))
    assert result.allocations == {"other": ("b2",), "slurm": ("a1",)}


def test_a_job_without_a_pool_never_takes_a_pools_spare():
    switches = {"leaf-1": ["n1", "n2", "n3", "n4"]}
    pooled = {"id": "slurm", "throughput": {"2": 2.0e14}, "current": ["n1", "n2"], "transition_s": 10,
              "pool": ["n1", "n2", "n3"]}
    other = {"id": "other", "throughput": {"1": 1.0e14, "2": 5.0e14}, "current": ["n4"], "transition_s": 10}
    result = plan(request(switches, [other, pooled]))
    assert result.allocations == {"other": ("n4",), "slurm": ("n1", "n2")}
    assert plan(request(switches, [other, pooled], down={"n2"})).allocations == {
        "other": ("n4",), "slurm": ("n1", "n3")}


def test_overlapping_pools_never_give_a_job_a_size_its_table_lacks():
    switches = {"leaf-1": [f"n{i}" for i in range(1, 7)]}
    jobs = [{"id": "a", "throughput": {"2": 1.0e14}, "current": [], "pool": ["n1", "n3", "n4", "n5", "n6"]},
            {"id": "c", "throughput": {"4": 9.0e14}, "current": [], "pool": ["n3", "n4", "n5", "n6"]}]
    result = plan(request(switches, jobs))  # sizes 2 + 4 fit the 6 nodes, but not the pools: a takes n3
    for job in jobs:
        nodes = result.allocations[job["id"]]
        assert len(nodes) == result.sizes[job["id"]] and str(len(nodes)) in {"0", *job["throughput"]}
        assert set(nodes) <= set(job["pool"])
    assert result.allocations == {"a": ("n1", "n3"), "c": ()} and result.waf == 1.0e14  # greedy, not best
