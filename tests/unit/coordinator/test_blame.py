"""Blame the right thing: a failure that follows the job backs off, then stops and alerts; it
never isolates a node. A node is blamed with hardware evidence; failures across jobs make it suspect."""

from __future__ import annotations

import pytest

from tests.unit.coordinator.test_fold import interleave
from tests.unit.coordinator.test_limits import refold, unhealthy
from tests.unit.coordinator.world import LIMITED, Recorder, incident, of_type, submitted
from trainmedic.recovery.coordinator.core import JobState, catch_up
from trainmedic.schemas import RanksFinished


def value_error(id: str, ts: float, severity: str = "SEV1"):
    """The detector's view of a ValueError on rank 0 (node n1): SEV2, escalated to SEV1 on a repeat."""
    return incident(id, severity, node="n1", job="llm", ranks=(0,), ts=ts, category="software_error")


def restarts(out: list) -> list:
    return [p for p in of_type(out, "recovery_planned") if p.kind == "restart"]


def test_the_same_value_error_every_generation_backs_off_then_gives_up_and_isolates_nothing() -> None:
    rec = Recorder(LIMITED)
    rec.started()
    [first] = restarts(rec.feed(value_error("g0", 100.0, "SEV2"), now=100.0))  # the first: at once
    rec.ack(of_type(rec.log, "command")[-3:], "done", now=101.0)
    times = [100.0]
    for n, (ts, wait) in enumerate(((110.0, 30.0), (140.0, 120.0), (260.0, 600.0))):
        assert rec.feed(value_error(f"g{n + 1}", ts), now=ts) == []  # SEV2 twice on n1: a SEV1, not n1's
        due = times[-1] + wait
        assert rec.tick(now=due - 0.5) == []  # backing off
        [plan] = restarts(rec.tick(now=due))
        assert (plan.generation, plan.nodes) == (n + 2, ("n1", "n2", "n3"))
        rec.ack(of_type(rec.log, "command")[-3:], "done", now=due + 1)
        times.append(due)
    assert times == [100.0, 130.0, 250.0, 850.0] and first.generation == 1
    out = rec.feed(value_error("g4", 900.0), now=900.0)  # the 5th: restarts spent
    [failed] = of_type(out, "recovery_failed")
    [alert] = of_type(out, "incident")
    assert (alert.category, alert.severity, alert.action, alert.job) == (
        "recovery_failed", "SEV1", "alert", "llm")
    assert failed.escalation == alert.id and "follows the job" in failed.reason
    assert rec.state.jobs["llm"].state is JobState.FAILED
    [skip] = rec.feed(value_error("g5", 5000.0), now=5000.0)  # given up stays given up
    assert skip.type == "recovery_skipped" and of_type(rec.log, "incident").count(alert) == 1
    assert unhealthy(rec) == []
    assert refold(rec) == rec.state
    assert all(refold(rec, interleave(rec.placed(), seed)) == rec.state for seed in range(10))
    assert catch_up(refold(rec, sorted(rec.log, key=lambda e: e.type != "job_submitted")), 5000.0) == []


def test_a_start_that_cannot_run_its_command_is_the_jobs_error() -> None:
    rec = Recorder(LIMITED)
    commands = of_type(rec.feed(submitted(), now=1.0), "command")
    rec.ack([c for c in commands if c.node != "n2"], "done", now=2.0)
    out = rec.ack([c for c in commands if c.node == "n2"], "failed", now=2.0,
                  reason="[Errno 2] No such file or directory: 'pyhton'")
    [failed] = of_type(out, "recovery_failed")
    [escalation] = of_type(out, "incident")
    assert (escalation.category, escalation.severity, escalation.node, escalation.job) == (
        "start_failed", "SEV2", None, "llm")
    assert "job error" in escalation.evidence[0]
    assert unhealthy(rec) == []
    [plan] = restarts(out)  # the job restarts where it was, and from here on backs off as any job error
    assert plan.nodes == ("n1", "n2", "n3")


def test_a_workdir_missing_on_the_node_is_the_jobs_error_and_isolates_no_one() -> None:
    rec = Recorder(LIMITED)
    commands = of_type(rec.feed(submitted(), now=1.0), "command")
    rec.ack([c for c in commands if c.node != "n1"], "done", now=2.0)
    missing = NotADirectoryError(20, "workdir /home/alice/x is not a directory on this node: no rank started")
    out = rec.ack([c for c in commands if c.node == "n1"], "failed", now=2.0, reason=str(missing))
    [escalation] = of_type(out, "incident")
    assert (escalation.severity, escalation.node, escalation.job) == ("SEV2", None, "llm")
    rec.tick(now=30.0)
    assert unhealthy(rec) == []


def ran_before_on_n1(rec: Recorder) -> None:
    """Job `other` ran on n1 (started, then every rank exited 0), before `llm` starts there."""
    commands = rec.feed(submitted("other", nodes=("n1",), throughput={1: 1.0e15}), now=0.5)
    rec.ack(commands, "done", 0.6)
    assert of_type(rec.feed(RanksFinished(ts=0.7, node="n1", job="other", generation=0, ranks=()), 0.7),
                   "job_ended")


def test_a_software_failure_on_one_node_across_two_jobs_makes_it_suspect_not_isolated() -> None:
    """Issue 45: what jobs report never isolates a node; two jobs failing on n1 make it suspect, and
    its health check decides (test_suspects.py)."""
    rec = Recorder(LIMITED)
    ran_before_on_n1(rec)
    rec.started()
    other = incident("other", "SEV2", node="n1", job="other", ts=90.0, category="software_error")
    rec.feed(other, now=90.0)
    out = rec.feed(value_error("g0", 100.0), now=100.0)
    out += rec.tick(now=102.0)
    assert unhealthy(rec) == []
    [check] = [c for c in of_type(out, "command") if c.action == "health_check"]
    assert check.node == "n1" and restarts(out)  # the node is checked, the job restarted


@pytest.mark.parametrize("other_job", ["invented-1", "other"])
def test_failures_of_jobs_not_run_on_the_node_blame_no_node(other_job: str) -> None:
    """Issue 32 (i): reports naming an invented job, or a real job on a node it never ran on, are
    no second job failing on that node: the job is restarted, no node is isolated."""
    rec = Recorder(LIMITED)
    rec.feed(submitted("other", nodes=("n4",), throughput={1: 1.0e15}), now=0.5)
    rec.started()
    rec.feed(incident("forged", "SEV2", node="n1", job=other_job, ts=90.0, category="cuda_error"), now=90.0)
    out = rec.feed(value_error("g0", 100.0), now=100.0) + rec.tick(now=102.0)
    assert unhealthy(rec) == [] and restarts(out)


def test_two_invented_jobs_failing_on_an_idle_node_isolate_nothing() -> None:
    """Issue 32 (i): the detector escalated the second forged failure on idle n5 to SEV1; neither
    job is one the coordinator runs, so n5 stays in service and nothing is planned."""
    rec = Recorder(LIMITED)
    rec.started()
    rec.feed(incident("f1", "SEV2", node="n5", job="invented-1", ts=90.0, category="cuda_error"), now=90.0)
    second = incident("f2", "SEV1", node="n5", job="invented-2", ts=91.0, category="cuda_error")
    out = rec.feed(second, now=91.0)
    out += rec.tick(now=100.0)
    assert unhealthy(rec) == [] and not of_type(out, "recovery_planned")
    assert all("no running job known" in skip.reason for skip in of_type(out, "recovery_skipped"))


def test_hardware_evidence_blames_the_node() -> None:
    rec = Recorder(LIMITED)
    rec.started()
    rec.feed(incident("xid", "SEV1", node="n2", ts=100.0, category="gpu_lost"), now=100.0)
    assert unhealthy(rec) == [] and of_type(rec.tick(now=102.0), "recovery_planned")
    assert unhealthy(rec) == ["n2"]


def test_different_failures_do_not_back_off_each_other() -> None:
    rec = Recorder(LIMITED)
    rec.started()
    kill = incident("kill", "SEV2", node="n1", ts=100.0, category="process_exit")
    assert restarts(rec.feed(kill, now=100.0))
    rec.ack(of_type(rec.log, "command")[-3:], "done", now=101.0)
    assert restarts(rec.feed(incident("hang", "SEV2", node="n2", ts=110.0, category="hang"), now=110.0))
