"""Acks and deadlines: completion, retries of the same command, failure and escalation."""

from __future__ import annotations

from tests.unit.coordinator.world import Recorder, incident, of_type, submitted
from trainmedic.recovery.coordinator.core import JobState


def test_a_plan_whose_commands_are_all_done_completes() -> None:
    rec = Recorder()
    commands = rec.feed(submitted(), now=1.0)
    out = rec.ack(commands[:-1], "done", now=2.0)
    assert of_type(out, "recovery_completed") == []  # one still outstanding
    out = rec.ack(commands[-1:], "done", now=3.0)
    [done] = of_type(out, "recovery_completed")
    assert (done.job, done.generation) == ("llm", 0)
    assert rec.state.jobs["llm"].state is JobState.RUNNING
    assert rec.tick(now=500.0) == []  # nothing left to time out


def test_an_unanswered_command_is_resent_with_the_same_id_then_escalated() -> None:
    rec = Recorder()  # ack_timeout_s=10, max_retries=2
    commands = rec.feed(submitted(), now=0.0)
    n3 = next(c for c in commands if c.type == "command" and c.node == "n3")
    rec.ack([c for c in commands if c is not n3], "done", now=1.0)
    assert rec.tick(now=9.9) == []
    resent = rec.tick(now=10.0)
    assert [(c.id, c.ts, c.worker) for c in resent] == [(n3.id, 10.0, n3.worker)]
    assert rec.tick(now=15.0) == []  # the deadline restarts with each send
    assert [c.id for c in rec.tick(now=20.0)] == [n3.id]
    out = rec.tick(now=30.0)  # third send unanswered: escalate
    [failed] = of_type(out, "recovery_failed")
    [escalation] = of_type(out, "incident")
    assert (failed.node, failed.command_id, failed.escalation) == ("n3", n3.id, escalation.id)
    assert "no answer after 3 sends" in failed.reason
    assert (escalation.severity, escalation.category, escalation.node) == ("SEV1", "start_failed", "n3")
    [plan] = of_type(out, "recovery_planned")  # the escalation is decided at once
    assert (plan.incident_id, plan.generation, plan.nodes) == (escalation.id, 1, ("n1", "n2", "n4"))
    assert not rec.state.nodes["n3"].healthy
    assert rec.state.jobs["llm"].state is JobState.RECOVERING


def test_an_accepted_command_that_never_finishes_fails_without_a_resend() -> None:
    rec = Recorder()  # done_timeout_s=100
    rec.started()
    out = rec.feed(incident("i2", "SEV2", node="n2"), now=50.0)
    rec.ack(out, "accepted", now=51.0)
    rec.ack([c for c in of_type(out, "command") if c.node != "n2"], "done", now=52.0)
    assert rec.tick(now=150.0) == []
    out = rec.tick(now=151.0)
    [failed] = of_type(out, "recovery_failed")
    assert failed.node == "n2" and "accepted but not done" in failed.reason
    assert {c.generation for c in of_type(out, "command")} == {2}  # the escalation's plan, no re-send


def test_a_failed_restart_escalates_to_sev1_on_that_node_and_a_new_plan() -> None:
    rec = Recorder()
    rec.started()
    out = rec.feed(incident("i2", "SEV2", node="n2"), now=50.0)
    n2 = next(c for c in of_type(out, "command") if c.node == "n2")
    out = rec.ack([n2], "failed", now=55.0, reason="exit code 1")
    [failed] = of_type(out, "recovery_failed")
    [escalation] = of_type(out, "incident")
    assert (escalation.severity, escalation.category, escalation.node, escalation.job) == (
        "SEV1", "restart_failed", "n2", "llm")
    assert "exit code 1" in failed.reason and "exit code 1" in escalation.evidence[0]
    [plan] = of_type(out, "recovery_planned")
    assert (plan.kind, plan.generation, plan.nodes) == ("reconfigure", 2, ("n1", "n3", "n4"))
    assert {(c.node, c.action, c.generation) for c in of_type(out, "command")} == {
        ("n2", "stop", 2), ("n1", "restart", 2), ("n3", "restart", 2), ("n4", "start", 2)}


def test_a_failed_reattempt_escalates_to_a_restart() -> None:
    rec = Recorder()
    rec.started()
    out = rec.feed(incident("i3", "SEV3", node="n1"), now=50.0)
    out = rec.ack(of_type(out, "command")[:1], "failed", now=51.0, reason="still failing")
    [escalation] = of_type(out, "incident")
    assert (escalation.severity, escalation.action) == ("SEV2", "restart")
    [plan] = of_type(out, "recovery_planned")
    assert (plan.kind, plan.generation) == ("restart", 1)


def test_a_refused_command_fails_the_plan_without_escalating() -> None:
    rec = Recorder()
    commands = rec.feed(submitted(), now=1.0)
    out = rec.ack(commands[1:2], "refused", now=2.0, reason="bad signature")
    [failed] = out
    assert failed.type == "recovery_failed" and failed.escalation is None and "bad signature" in failed.reason
    assert rec.state.jobs["llm"].state is JobState.FAILED
    assert rec.tick(now=1000.0) == []  # a failed plan is not retried


def test_an_isolated_node_does_not_hold_up_its_plan() -> None:
    rec = Recorder()
    rec.started()
    out = rec.feed(incident("i1", "SEV1", node="n2"), now=100.0)
    out = rec.ack([c for c in of_type(out, "command") if c.node != "n2"], "done", now=101.0)
    # the stop to n2 is best effort: the plan completes without its answer, and it is never re-sent
    assert len(of_type(out, "recovery_completed")) == 1
    assert rec.state.jobs["llm"].state is JobState.RUNNING
    assert rec.tick(now=1000.0) == []


def test_a_resent_command_answered_by_its_recorded_ack_completes_and_a_duplicate_changes_nothing() -> None:
    rec = Recorder()  # the executor applied n3's start, but its ack was lost: the resend is re-acked
    commands = rec.feed(submitted(), now=0.0)
    n3 = next(c for c in commands if c.type == "command" and c.node == "n3")
    rec.ack([c for c in commands if c is not n3], "done", now=1.0)
    [resent] = rec.tick(now=10.0)
    out = rec.ack([resent], "done", now=10.5)
    assert [e.type for e in out] == ["recovery_completed"]
    before = (rec.state.jobs["llm"].state, rec.state.commands[n3.id].status, rec.state.nodes["n3"].healthy)
    assert rec.ack([resent], "done", now=11.0) == []  # the same answer again, e.g. a second resend's
    assert rec.ack([resent], "accepted", now=11.5) == []
    assert (rec.state.jobs["llm"].state, rec.state.commands[n3.id].status,
            rec.state.nodes["n3"].healthy) == before
    assert rec.tick(now=500.0) == []
