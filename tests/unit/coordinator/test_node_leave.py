"""A node that leaves on purpose (`trainmedic node` stopped: `node_leaving`, signed by the node) is
drained by itself: its job is re-planned off it with one plan, nothing is isolated, a stop it never
answers is no fault; its `node_joined` later ends that leave, never an operator's drain."""

from __future__ import annotations

from tests.unit.coordinator.test_provenance import record
from tests.unit.coordinator.world import Recorder, of_type
from trainmedic.recovery.coordinator.core.lifecycle import new_work_refused, offered, status
from trainmedic.recovery.coordinator.provenance import Trust, unverified
from trainmedic.recovery.signing import TrustedKeys, generate
from trainmedic.schemas import NodeDrained, NodeJoined, NodeLeaving


def leaving(node: str, ts: float) -> NodeLeaving:
    return NodeLeaving(ts=ts, node=node, reason="SIGTERM: planned shutdown")


def joined(node: str, ts: float) -> NodeJoined:
    return NodeJoined(ts=ts, node=node)


def left_n2() -> tuple[Recorder, list]:
    """The job on n1-n3; n2 announced at t=10 that it leaves; the tick's re-plan."""
    rec = Recorder()
    rec.started(now=1.0)
    assert rec.feed(leaving("n2", ts=10.0), now=10.0) == []  # re-planned when quiet, on the tick
    assert status(rec.state, "n2") == "leaving"  # its job still there
    return rec, rec.tick(now=10.5)


def test_a_leaving_node_has_its_job_moved_off_with_one_plan_and_is_not_isolated() -> None:
    rec, out = left_n2()
    node = rec.state.nodes["n2"]
    assert (status(rec.state, "n2"), node.leaving, node.heard_from) == ("left", True, 10.0)
    assert node.healthy
    assert node.mode == "ready"  # an operator's mode is untouched: the leave is the node's own
    [plan] = of_type(out, "recovery_planned")
    assert (plan.job, plan.kind, plan.generation, plan.nodes, plan.previous, plan.isolated) == (
        "llm", "reconfigure", 1, ("n1", "n3", "n4"), ("n1", "n2", "n3"), {})
    assert sorted((c.action, c.node) for c in of_type(out, "command")) == [
        ("restart", "n1"), ("restart", "n3"), ("start", "n4"), ("stop", "n2")]
    assert rec.tick(now=11.0) == []  # in flight: no second plan
    assert "n2" not in offered(rec.state) and "is leaving (SIGTERM" in new_work_refused(rec.state, "n2")


def test_a_stop_the_leaving_node_never_answers_is_no_fault() -> None:
    rec, out = left_n2()
    others = [c for c in of_type(out, "command") if c.node != "n2"]
    done = rec.ack(others, "done", now=12.0)
    assert of_type(done, "recovery_completed")  # the gone node's stop is not waited for
    late = rec.tick(now=500.0)
    assert of_type(late, "incident") == [] and of_type(late, "recovery_failed") == []
    assert status(rec.state, "n2") == "left" and rec.state.nodes["n2"].healthy


def test_the_nodes_join_ends_its_leave_and_offers_it_again() -> None:
    rec, out = left_n2()
    rec.ack(out, "done", now=12.0)
    rec.feed(joined("n2", ts=20.0), now=20.0)
    assert (status(rec.state, "n2"), rec.state.nodes["n2"].heard_from) == ("ready", 20.0)
    assert "n2" in offered(rec.state)
    assert of_type(rec.tick(now=21.0), "recovery_skipped")  # the pool changed: the planner looked again


def test_a_join_older_than_the_leave_does_not_end_it() -> None:
    rec, _ = left_n2()
    rec.feed(joined("n2", ts=5.0), now=11.0)  # an earlier start's announcement, read late
    assert rec.state.nodes["n2"].leaving and rec.state.nodes["n2"].heard_from == 10.0


def test_a_join_does_not_end_an_operators_drain() -> None:
    rec = Recorder()
    rec.started(now=1.0)
    rec.feed(NodeDrained(ts=10.0, node="n2", reason="replace the NIC"), now=10.0)
    rec.feed(leaving("n2", ts=11.0), now=11.0)
    rec.feed(joined("n2", ts=20.0), now=20.0)
    assert status(rec.state, "n2") in ("draining", "drained") and "n2" not in offered(rec.state)


def test_a_leave_from_a_node_outside_the_cluster_is_ignored() -> None:
    rec = Recorder()
    rec.started(now=1.0)
    rec.feed(leaving("stranger", ts=10.0), now=10.0)
    assert "stranger" not in rec.state.nodes and rec.tick(now=11.0) == []


def test_a_leave_signed_by_another_nodes_key_is_refused() -> None:
    n1, n2 = generate(), generate()
    trust = Trust.of({"node:n1": TrustedKeys.of(n1.private.public_key()),
                      "node:n2": TrustedKeys.of(n2.private.public_key())})
    assert unverified(record(leaving("n1", 1.0), n1), trust) is None
    assert unverified(record(joined("n1", 1.0), n1), trust) is None
    why = unverified(record(leaving("n1", 1.0), n2), trust)  # n2's key draining n1
    assert why.kind == "wrong_node" and "a node_leaving from n1 signed by the key of node n2" in str(why)
    assert unverified(record(leaving("n1", 1.0)), trust).kind == "unsigned"
    assert unverified(record(joined("n1", 1.0), n2), trust).kind == "wrong_node"
