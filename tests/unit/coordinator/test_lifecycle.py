"""Nodes leave and come back: cordon, drain, uncordon, re-admission, and jobs that grow back."""

from __future__ import annotations

from tests.unit.coordinator.world import CONFIG, LIMITED, Recorder, incident, of_type, submitted
from trainmedic.recovery.coordinator.core import CoordinatorConfig
from trainmedic.recovery.coordinator.core.lifecycle import offered, status
from trainmedic.recovery.coordinator.core.readmission import outlook
from trainmedic.schemas import NodeCordoned, NodeDrained, NodeUncordoned

# Three nodes and a job on all of them that can run on 2 or 3: losing one shrinks it, and a
# node coming back is the only way to grow.
THREE = CONFIG.model_copy(update={"nodes": CONFIG.nodes[:3]})


def cordon(node: str, ts: float, reason: str = "bios update") -> NodeCordoned:
    return NodeCordoned(ts=ts, node=node, reason=reason)


def drain(node: str, ts: float) -> NodeDrained:
    return NodeDrained(ts=ts, node=node, reason="replace the NIC")


def uncordon(node: str, ts: float) -> NodeUncordoned:
    return NodeUncordoned(ts=ts, node=node, reason="fixed")


def settled(rec: Recorder, out: list, now: float) -> list:
    """Ack every command of `out` done; returns what that emits (the plan's completion)."""
    return rec.ack(out, "done", now)


def shrunk(config: CoordinatorConfig = THREE) -> Recorder:
    """The job on n1-n3 lost n3 to a SEV1 at t=50 and runs on n1 n2 since t=52."""
    rec = Recorder(config)
    rec.started(now=1.0)
    out = rec.feed(incident("gpu", "SEV1", node="n3", ts=50.0, category="gpu_lost"), now=50.0)
    assert of_type(out, "recovery_planned")[0].nodes == ("n1", "n2")
    settled(rec, out, now=52.0)
    return rec


def test_a_cordoned_spare_gets_no_new_ranks() -> None:
    rec = Recorder()
    rec.started(now=1.0)
    rec.feed(cordon("n4", ts=10.0), now=10.0)
    out = rec.feed(incident("i", "SEV1", node="n2", ts=50.0), now=50.0)
    assert of_type(out, "recovery_planned")[0].nodes == ("n1", "n3", "n5")
    assert status(rec.state, "n4") == "cordoned"


def test_a_cordoned_node_keeps_the_job_it_runs() -> None:
    rec = Recorder()
    rec.started(now=1.0)
    rec.feed(cordon("n1", ts=10.0), now=10.0)
    assert rec.tick(now=11.0) == []  # a cordon moves nothing
    out = rec.feed(incident("i", "SEV1", node="n2", ts=50.0), now=50.0)
    assert of_type(out, "recovery_planned")[0].nodes == ("n1", "n3", "n4")


def test_a_node_with_a_held_sev1_is_not_offered_to_other_jobs() -> None:
    rec = Recorder()
    rec.started(now=1.0)
    rec.state.incidents["held"] = incident("held", "SEV1", node="n4", job=None, ts=5.0)
    assert offered(rec.state) == frozenset({"n1", "n2", "n3", "n5", "n6"})


def test_a_drain_moves_the_job_off_the_node_with_one_plan() -> None:
    rec = Recorder()
    rec.started(now=1.0)
    rec.feed(drain("n2", ts=10.0), now=10.0)
    assert status(rec.state, "n2") == "draining"
    out = rec.tick(now=10.5)
    plans = of_type(out, "recovery_planned")
    assert [(p.job, p.kind, p.generation, p.nodes, p.previous) for p in plans] == [
        ("llm", "reconfigure", 1, ("n1", "n3", "n4"), ("n1", "n2", "n3"))]
    assert sorted((c.action, c.node) for c in of_type(out, "command")) == [
        ("restart", "n1"), ("restart", "n3"), ("start", "n4"), ("stop", "n2")]
    assert rec.tick(now=11.0) == []  # in flight: no second plan
    assert of_type(settled(rec, out, now=12.0), "recovery_completed")
    assert rec.tick(now=13.0) == [] and status(rec.state, "n2") == "drained"


def test_a_job_grows_back_onto_an_uncordoned_node() -> None:
    rec = shrunk()
    assert status(rec.state, "n3") == "isolated"
    rec.feed(uncordon("n3", ts=60.0), now=60.0)
    assert status(rec.state, "n3") == "ready"
    out = rec.tick(now=61.0)
    [plan] = of_type(out, "recovery_planned")
    assert (plan.kind, plan.incident_id, plan.generation, plan.nodes, plan.previous) == (
        "reconfigure", None, 2, ("n1", "n2", "n3"), ("n1", "n2"))
    assert plan.restore["n3"].kind == "replica" and plan.restore["n3"].node in ("n1", "n2")
    assert sorted((c.action, c.node) for c in of_type(out, "command")) == [
        ("restart", "n1"), ("restart", "n2"), ("start", "n3")]
    settled(rec, out, now=62.0)
    assert rec.tick(now=63.0) == []  # grown: one plan, not one per tick


def test_no_growth_when_the_restart_costs_more_than_it_earns() -> None:
    rec = shrunk()
    rec.state.jobs["llm"].spec = rec.state.jobs["llm"].spec.model_copy(update={"transition_s": 1e6})
    rec.feed(uncordon("n3", ts=60.0), now=60.0)
    [skip] = rec.tick(now=61.0)
    assert (skip.type, skip.job, skip.incident_id) == ("recovery_skipped", None, None)
    assert "keeps every job where it is" in skip.reason and "(free: n3)" in skip.reason
    assert rec.tick(now=62.0) == []


def test_growth_waits_until_no_plan_is_in_flight() -> None:
    rec = Recorder(THREE)
    rec.started(now=1.0)
    out = rec.feed(incident("gpu", "SEV1", node="n3", ts=50.0), now=50.0)
    rec.feed(uncordon("n3", ts=51.0), now=51.0)
    assert rec.tick(now=51.5) == []  # the shrink is still in flight
    settled(rec, out, now=52.0)
    assert of_type(rec.tick(now=53.0), "recovery_planned")[0].nodes == ("n1", "n2", "n3")


def test_an_uncordon_older_than_the_isolation_does_not_end_it() -> None:
    rec = shrunk()
    rec.feed(uncordon("n3", ts=40.0), now=60.0)  # written before the isolation at t=50
    assert status(rec.state, "n3") == "isolated"


def test_a_new_job_is_not_started_on_a_cordoned_node() -> None:
    rec = Recorder()
    rec.feed(cordon("n2", ts=0.5), now=0.5)
    [skip] = rec.feed(submitted(), now=1.0)
    assert skip.reason == ("not started: node n2 is cordoned (bios update) (it waits for a re-plan)")


def readmission_world(**config) -> Recorder:
    """`shrunk`, with the isolating incident resolved at t=100."""
    rec = shrunk(THREE.model_copy(update=config))
    rec.feed(incident("gpu", "SEV1", node="n3", ts=100.0, status="resolved", category="gpu_lost"), now=100.0)
    return rec


def test_an_isolated_node_is_readmitted_after_its_probation_and_the_job_grows() -> None:
    rec = readmission_world()
    assert rec.tick(now=399.0) == []
    [back] = rec.tick(now=400.0)
    assert (back.type, back.node, back.incident_id, back.ts) == ("node_readmitted", "n3", "gpu", 400.0)
    assert back.reason == ("incident gpu (gpu_lost) resolved; clean for 300 s (probation 300 s); "
                           "isolated 1 time(s) in the last 86400 s (limit 3)")
    assert rec.state.nodes["n3"].healthy
    assert of_type(rec.tick(now=401.0), "recovery_planned")[0].nodes == ("n1", "n2", "n3")


def test_a_new_incident_on_the_node_restarts_its_probation() -> None:
    rec = readmission_world()
    rec.feed(incident("warm", "WARN", node="n3", job=None, ts=200.0, status="resolved"), now=200.0)
    assert rec.tick(now=400.0) == []
    assert of_type(rec.tick(now=500.0), "node_readmitted")


def test_no_readmission_while_the_fault_is_open_when_off_or_after_too_many_failures() -> None:
    rec = shrunk()
    assert rec.tick(now=10_000.0) == []  # the gpu_lost incident never resolved
    assert readmission_world(readmission="off").tick(now=10_000.0) == []
    rec = readmission_world(readmit_max_failures=1)
    rec.state.nodes["n3"].isolations = ((20.0, "old"), *rec.state.nodes["n3"].isolations)
    assert rec.tick(now=10_000.0) == []
    assert of_type(rec.tick(now=20.0 + 86_400.5), "node_readmitted")  # the old failure left the window


def test_an_open_incident_older_than_the_nodes_last_return_does_not_keep_it_out() -> None:
    # an escalation of the coordinator's (never resolved), then a person uncordoned the node
    for opened, readmitted in ((10.0, True), (60.0, False)):
        rec = readmission_world()
        rec.state.incidents["esc"] = incident("esc", "SEV1", node="n3", ts=opened, category="restart_failed")
        rec.state.nodes["n3"].returned_ts = 20.0
        assert bool(of_type(rec.tick(now=10_000.0), "node_readmitted")) is readmitted


def test_a_node_event_from_a_clock_ahead_waits_until_ours_gets_there() -> None:
    rec = shrunk()
    rec.feed(uncordon("n3", ts=70.0), now=61.0)
    assert rec.tick(now=61.5) == []
    assert of_type(rec.tick(now=70.0), "recovery_planned")[0].nodes == ("n1", "n2", "n3")


def test_the_outlook_of_an_isolated_node_says_when_it_comes_back() -> None:
    rec = shrunk()
    node = rec.state.nodes["n3"]
    assert outlook(rec.state, node, 60.0) == "back 300 s after its incident resolves"
    rec.feed(incident("gpu", "SEV1", node="n3", ts=100.0, status="resolved", category="gpu_lost"), now=100.0)
    assert outlook(rec.state, node, 110.0) == "back once clean for 300 s"
    node.isolations = ((1.0, "a"), (2.0, "b"), (3.0, "c"), *node.isolations)
    assert outlook(rec.state, node, 110.0) == "isolated 4 times in 86400 s: a person decides (uncordon it)"
    off = shrunk(THREE.model_copy(update={"readmission": "off"}))
    assert outlook(off.state, off.state.nodes["n3"], 60.0) == "re-admission off: uncordon it"


def test_the_node_gauge_counts_cordoned_and_draining_nodes() -> None:
    from prometheus_client import REGISTRY

    from trainmedic.recovery.coordinator import observe

    rec = Recorder()
    rec.feed(cordon("n4", ts=1.0), now=1.0)
    rec.feed(cordon("n5", ts=1.0), now=1.0)
    rec.feed(drain("n6", ts=2.0), now=2.0)
    observe.cluster(rec.state, 2.0)
    assert [REGISTRY.get_sample_value("trainmedic_nodes", {"state": s})
            for s in ("healthy", "isolated", "cordoned", "draining")] == [6, 0, 2, 1]


def test_an_uncordon_of_a_node_outside_the_configured_cluster_invents_no_spare() -> None:
    rec = shrunk()
    rec.feed(uncordon("n99", ts=60.0), now=60.0)
    assert "n99" not in rec.state.nodes and rec.tick(now=61.0) == []


def test_returning_a_node_does_not_refund_the_isolation_cap() -> None:
    rec = Recorder(LIMITED)  # at most one isolation per 10 minutes
    rec.started(now=1.0)
    rec.feed(incident("a", "SEV1", node="n2", ts=50.0, category="gpu_lost"), now=50.0)
    rec.ack(rec.tick(now=53.0), "done", now=53.5)  # grouped for 2 s, then isolated
    assert not rec.state.healthy("n2")
    rec.feed(uncordon("n2", ts=60.0), now=60.0)
    rec.ack(rec.tick(now=61.0), "done", now=61.5)
    rec.feed(incident("b", "SEV1", node="n3", ts=70.0, category="gpu_lost"), now=70.0)
    out = rec.tick(now=73.0)
    assert rec.state.healthy("n3") and of_type(out, "recovery_planned") == []
    assert "isolation cap reached" in of_type(out, "recovery_skipped")[-1].reason
