"""A coordinator killed at any point rebuilds from the log and issues only what is missing."""

from __future__ import annotations

from tests.unit.coordinator.test_fold import fold, scenario
from tests.unit.coordinator.world import Recorder, incident, of_type, submitted
from trainmedic.recovery.coordinator.core import ClusterState, apply, catch_up
from trainmedic.schemas import CommandAcked


def rebuilt(log: list) -> ClusterState:
    return fold(sorted(log, key=lambda e: e.type != "job_submitted"))


def test_a_restart_after_everything_was_issued_issues_nothing() -> None:
    rec = scenario()
    assert rec.tick(now=62.0) == []
    state = rebuilt(rec.log)
    assert catch_up(state, now=62.0) == []
    assert state == rec.state


def test_a_restart_between_a_plan_and_its_commands_sends_only_the_missing_ones() -> None:
    rec = Recorder()
    rec.started()
    out = rec.feed(incident("i1", "SEV1", node="n2"), now=100.0)
    commands = of_type(out, "command")
    cut = rec.log.index(commands[2])  # the coordinator died after two of four commands
    state = rebuilt(rec.log[:cut])
    again = catch_up(state, now=105.0)
    assert [(c.id, c.node, c.action, c.generation, c.worker) for c in again] == [
        (c.id, c.node, c.action, c.generation, c.worker) for c in commands[2:]]
    assert {c.ts for c in again} == {105.0}


def test_an_incident_read_but_never_decided_is_decided_after_the_restart() -> None:
    live = Recorder()
    live.started()
    expected = live.feed(incident("i2", "SEV2", node="n2"), now=100.0)
    cut = len(live.log) - len(expected)  # died right after reading the incident
    out = catch_up(rebuilt(live.log[:cut]), now=100.0)
    assert out == expected


def test_a_job_submitted_while_the_coordinator_was_down_is_started() -> None:
    state = rebuilt([submitted()])
    out = catch_up(state, now=7.0)
    assert out == Recorder().feed(submitted(), now=7.0)


def test_a_failure_acknowledged_while_the_coordinator_was_down_escalates_after_the_restart() -> None:
    rec = Recorder()
    rec.started()
    out = rec.feed(incident("i2", "SEV2", node="n2"), now=50.0)
    n2 = next(c for c in of_type(out, "command") if c.node == "n2")
    state = rebuilt(rec.log)
    apply(state, CommandAcked(ts=51.0, node="n2", command_id=n2.id, job="llm", generation=1, status="failed"))
    out = catch_up(state, now=52.0)
    assert [e.type for e in out][:2] == ["recovery_failed", "incident"]
    assert of_type(out, "incident")[0].category == "restart_failed"
    assert of_type(out, "recovery_planned")[0].generation == 2
