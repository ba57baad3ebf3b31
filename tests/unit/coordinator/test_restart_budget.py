"""The restart budget reads the job's progress (`Incident.progress`): a job that never completed a
step gets one retry, a job that ran healthily between failures gets its budget back, and one whose
incidents say nothing of progress counts every restart as before."""

from __future__ import annotations

from tests.unit.coordinator.test_blame import restarts
from tests.unit.coordinator.test_fold import interleave
from tests.unit.coordinator.test_limits import refold
from tests.unit.coordinator.world import LIMITED, Recorder, incident, of_type
from trainmedic.recovery.coordinator.core import JobState
from trainmedic.schemas.incident import Progress


def crash(id: str, ts: float, steps: int | None = None, since: float | None = None):
    """The detector's view of rank 0 exiting with an error (SEV2, the job's), with how far its
    generation got (None: an older detector that says nothing of progress)."""
    event = incident(id, "SEV2", node="n1", job="llm", ranks=(0,), ts=ts, category="process_exit")
    if steps is None:
        return event
    return event.model_copy(update={"progress": Progress(steps=steps, since=since)})


def restarted(rec: Recorder, event, now: float) -> bool:
    """Feed a failure, tick until its backoff is over; True if the job restarted, False if it gave up."""
    out = rec.feed(event, now=now)
    for wait in range(0, 700, 10):
        if plans := restarts(out):
            rec.ack(of_type(rec.log, "command")[-3:], "done", now=plans[0].ts + 1)
            return True
        if of_type(out, "recovery_failed"):
            return False
        out = rec.tick(now=now + wait)
    raise AssertionError(f"neither restarted nor gave up: {out}")


def test_a_job_that_never_completed_a_step_fails_after_one_retry_with_the_reason() -> None:
    rec = Recorder(LIMITED)
    rec.started()
    assert restarted(rec, crash("c0", 10.0, steps=0), now=10.0)  # the retry: at once
    assert [p.ts for p in restarts(rec.log)] == [10.0]
    out = rec.feed(crash("c1", 20.0, steps=0), now=20.0)
    [failed] = of_type(out, "recovery_failed")
    [alert] = of_type(out, "incident")
    assert "never completed a step, 1 restart included" in failed.reason
    assert "trainmedic job status llm" in failed.reason and alert.category == "recovery_failed"
    assert rec.state.jobs["llm"].state is JobState.FAILED
    assert refold(rec) == rec.state


def test_a_job_that_stepped_once_keeps_the_whole_budget() -> None:
    rec = Recorder(LIMITED)
    rec.started()
    assert restarted(rec, crash("c0", 100.0, steps=40, since=30.0), now=100.0)
    # the restarted generation fails before its first step: no longer "never stepped"
    assert restarted(rec, crash("c1", 110.0, steps=0), now=110.0)
    assert restarted(rec, crash("c2", 150.0, steps=0), now=150.0)
    assert rec.state.jobs["llm"].state is not JobState.FAILED


def test_failures_after_healthy_stretches_never_exhaust_the_budget() -> None:
    """Eight failures 15 minutes apart, each after 11 minutes of steps: within any hour four or more,
    which without progress gives up at the fifth; each healthy stretch gives the budget back, and
    each restart goes at once (no backoff)."""
    rec = Recorder(LIMITED)
    rec.started()
    for n in range(8):
        ts = 1000.0 + 900.0 * n
        assert restarted(rec, crash(f"c{n}", ts, steps=300, since=ts - 660.0), now=ts)
    assert [p.ts for p in restarts(rec.log)] == [1000.0 + 900.0 * n for n in range(8)]
    assert refold(rec) == rec.state
    assert all(refold(rec, interleave(rec.placed(), seed)) == rec.state for seed in range(5))


def test_short_healthy_stretches_still_exhaust_the_budget() -> None:
    """Steps for 5 minutes before each failure (under healthy_run_s): a crash loop that steps."""
    rec = Recorder(LIMITED)
    rec.started()
    outcomes = [restarted(rec, crash(f"c{n}", ts, steps=20, since=ts - 300.0), now=ts)
                for n, ts in enumerate((1000.0, 1400.0, 1800.0, 2200.0, 2600.0))]
    assert outcomes == [True, True, True, True, False]
    [failed] = of_type(rec.log, "recovery_failed")
    assert failed.reason.startswith("4 restarts of llm for ") and "did not cure it" in failed.reason


def test_incidents_without_progress_count_every_restart_as_before() -> None:
    rec = Recorder(LIMITED)
    rec.started()
    outcomes = [restarted(rec, crash(f"c{n}", ts), now=ts)
                for n, ts in enumerate((1000.0, 1100.0, 1300.0, 1500.0, 2200.0))]
    assert outcomes == [True, True, True, True, False]
    assert rec.state.jobs["llm"].stepped is None
