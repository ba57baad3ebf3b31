"""Blast-radius limits: isolations are capped per rolling window, and faults that arrive together
are planned together. Every decision not to act is on the log, and the log folds back to the state."""

from __future__ import annotations

import pytest

from tests.unit.coordinator.test_fold import interleave
from tests.unit.coordinator.world import LIMITED, Recorder, incident, of_type, submitted
from trainmedic.recovery.coordinator.core import ClusterState, CoordinatorConfig, apply, catch_up


def lost(id: str, node: str, ts: float, category: str = "node_lost"):
    return incident(id, "SEV1", node=node, job=None, ts=ts, category=category)


def refold(rec: Recorder, events: list | None = None) -> ClusterState:
    state = ClusterState.initial(rec.state.config)
    for event in rec.log if events is None else events:
        apply(state, event)
    return state


def unhealthy(rec: Recorder) -> list[str]:
    return sorted(n.id for n in rec.state.nodes.values() if not n.healthy)


def four_lost_at_once() -> tuple[Recorder, list]:
    """The job on n1-n3, a second one on n4; all four nodes lost within a second."""
    rec = Recorder(LIMITED)
    rec.started()
    rec.ack(rec.feed(submitted("small", nodes=("n4",), throughput={1: 1.0e15}), now=3.0), "done", now=4.0)
    waiting = [rec.feed(lost(f"lost-{n}", n, ts=100.0 + i / 10), now=100.0 + i / 10)
               for i, n in enumerate(("n1", "n2", "n3", "n4"))]
    assert waiting == [[], [], [], []]  # node SEV1s wait group_window_s for the rest of their group
    out = rec.tick(now=102.0)
    rec.ack([c for c in of_type(out, "command") if c.node != "n1"], "done", now=102.5)
    return rec, out


def test_four_nodes_lost_at_once_isolate_one_and_raise_one_mass_failure() -> None:
    rec, out = four_lost_at_once()
    assert unhealthy(rec) == ["n1"]  # max(1, 10 % of 6 nodes) = 1
    [alert] = of_type(out, "incident")
    assert (alert.category, alert.severity, alert.action, alert.status) == (
        "mass_failure", "SEV1", "alert", "open")
    assert all(n in alert.evidence[0] for n in ("n2", "n3", "n4"))
    held = {s.incident_id: s for s in of_type(out, "recovery_skipped")}
    assert sorted(held) == ["lost-n2", "lost-n3", "lost-n4"]
    assert all("isolation cap reached" in s.reason and alert.id in s.reason for s in held.values())
    [plan] = of_type(out, "recovery_planned")  # one re-plan, for the one isolated node
    assert (plan.job, plan.incident_id, plan.isolated) == ("llm", "lost-n1", {"n1": "lost-n1"})
    assert "n1" not in plan.nodes and rec.state.jobs["small"].nodes == ("n4",)  # the held keep their jobs
    assert rec.tick(now=103.0) == [] and rec.feed(alert, now=103.0) == []  # the alert is for a person


def test_the_cap_rolls_over_after_the_isolation_window() -> None:
    rec, _ = four_lost_at_once()  # n1 isolated at 102
    rec.feed(lost("late-n5", "n5", ts=650.0), now=650.0)
    out = rec.tick(now=652.0)  # 550 s after the isolation: still capped, and the alert is still open
    [skip] = of_type(out, "recovery_skipped")
    assert of_type(out, "incident") == of_type(out, "recovery_planned") == []
    assert "isolation cap reached" in skip.reason and unhealthy(rec) == ["n1"]
    rec.feed(lost("later-n6", "n6", ts=702.0, category="gpu_lost"), now=702.0)
    assert rec.tick(now=703.9) == []  # grouping: the fault waits 2 s
    out = rec.tick(now=704.0)  # 602 s after the first isolation: the window has rolled over
    assert unhealthy(rec) == ["n1", "n6"]
    assert of_type(out, "incident") == []


def test_two_faults_within_a_few_seconds_make_one_re_plan() -> None:
    rec = Recorder(CoordinatorConfig(**{**LIMITED.model_dump(), "isolation_cap": 0.5}))
    rec.started()
    assert rec.feed(lost("a", "n1", ts=100.0, category="gpu_lost"), now=100.0) == []
    assert rec.feed(lost("b", "n2", ts=101.5), now=101.5) == []
    out = rec.tick(now=102.0)
    [plan] = of_type(out, "recovery_planned")
    assert (plan.generation, plan.isolated) == (1, {"n1": "a", "n2": "b"})
    assert not {"n1", "n2"} & set(plan.nodes)
    [together] = of_type(out, "recovery_skipped")
    assert together.incident_id == "b" and "planned together" in together.reason
    assert unhealthy(rec) == ["n1", "n2"] and rec.tick(now=103.0) == []


def test_two_job_faults_within_a_few_seconds_make_one_restart() -> None:
    rec = Recorder(LIMITED)
    rec.started()
    [plan] = of_type(rec.feed(incident("x", "SEV2", node="n1", ts=100.0), now=100.0), "recovery_planned")
    [skip] = rec.feed(incident("y", "SEV2", node="n3", ts=101.0), now=101.0)
    assert skip.type == "recovery_skipped" and plan.plan_id in skip.reason
    assert len(of_type(rec.log, "recovery_planned")) == 2  # the start and one restart


@pytest.mark.parametrize("seed", range(10))
def test_the_log_of_capped_and_grouped_decisions_folds_to_the_live_state(seed: int) -> None:
    rec, _ = four_lost_at_once()
    rec.feed(lost("late-n5", "n5", ts=650.0), now=650.0)
    rec.tick(now=652.0)
    assert refold(rec) == rec.state
    assert refold(rec, interleave(rec.placed(), seed)) == rec.state
    assert refold(rec, [e for event in rec.log for e in (event, event)]) == rec.state
    rebuilt = refold(rec, sorted(rec.log, key=lambda e: e.type != "job_submitted"))
    assert catch_up(rebuilt, now=653.0) == []  # a restarted coordinator issues nothing twice


def test_a_job_fault_that_comes_with_a_node_fault_is_answered_by_its_re_plan() -> None:
    rec = Recorder(LIMITED)
    rec.started()
    assert rec.feed(lost("xid", "n2", ts=100.0, category="gpu_lost"), now=100.0) == []
    peer = incident("peer-exit", "SEV2", node="n1", ts=100.5, category="process_exit")
    assert rec.feed(peer, now=100.5) == []
    [plan] = of_type(rec.tick(now=102.0), "recovery_planned")
    [skip] = of_type(rec.tick(now=103.0), "recovery_skipped")
    assert (plan.kind, skip.incident_id) == ("reconfigure", "peer-exit") and plan.plan_id in skip.reason
    assert len(of_type(rec.log, "recovery_planned")) == 2  # the start and the one re-plan


def test_a_job_fault_waiting_for_a_node_fault_is_answered_by_its_re_plan_however_long_the_tick() -> None:
    rec = Recorder(LIMITED.model_copy(update={"group_window_s": 1.5, "tick_s": 2.0}))
    rec.started()
    assert rec.feed(lost("xid", "n2", ts=100.0, category="gpu_lost"), now=100.0) == []
    peer = incident("peer-exit", "SEV2", node="n1", ts=100.5, category="process_exit")
    assert rec.feed(peer, now=100.5) == []
    [plan] = of_type(rec.tick(now=101.5), "recovery_planned")  # woken at the end of the group's window
    [skip] = of_type(rec.tick(now=103.5), "recovery_skipped")  # the next tick, 2 s later
    assert (plan.kind, skip.incident_id) == ("reconfigure", "peer-exit") and plan.plan_id in skip.reason


def test_node_faults_one_heartbeat_apart_are_one_re_plan_with_the_default_window() -> None:
    rec = Recorder(LIMITED.model_copy(update={"group_window_s": CoordinatorConfig().group_window_s,
                                              "isolation_cap": 0.5}))
    rec.started()
    assert rec.feed(lost("a", "n1", ts=100.0, category="gpu_lost"), now=100.0) == []
    assert rec.feed(lost("b", "n2", ts=101.2), now=101.2) == []  # its last heartbeat came 1 s earlier
    assert rec.tick(now=101.4) == []
    [plan] = of_type(rec.tick(now=101.5), "recovery_planned")
    assert plan.isolated == {"n1": "a", "n2": "b"}
