"""When following a job is done (`trainmedic run`, `job logs --follow`): when it ended, or when the
coordinator gave up on it; not in the gap between a failed plan and the re-plan that heals it."""

from __future__ import annotations

from tests.unit.coordinator.test_limits import refold
from tests.unit.coordinator.world import Recorder, incident, of_type, submitted
from trainmedic.ops.jobs.view import over
from trainmedic.recovery.coordinator.core import JobState
from trainmedic.schemas.jobs import RestartPolicy


def test_a_failed_plan_followed_by_a_re_plan_is_not_over() -> None:
    rec = Recorder()
    rec.started()
    out = rec.feed(incident("i2", "SEV2", node="n2"), now=50.0)
    rec.ack([c for c in of_type(out, "command") if c.node == "n2"], "failed", now=55.0, reason="exit code 1")
    failed = next(i for i, e in enumerate(rec.log) if e.type == "recovery_failed")
    gap = refold(rec, rec.log[:failed + 1])  # what a follower has folded before the re-plan came
    assert gap.jobs["llm"].state is JobState.FAILED and not over(gap, "llm")
    assert rec.state.jobs["llm"].state is JobState.RECOVERING and not over(rec.state, "llm")


def test_a_job_the_coordinator_gave_up_on_is_over() -> None:
    rec = Recorder()
    rec.feed(submitted(restart=RestartPolicy(max_restarts=0)), now=1.0)
    rec.ack(of_type(rec.log, "command"), "done", now=2.0)
    out = rec.feed(incident("i2", "SEV2", node="n2", category="software_error"), now=50.0)
    [failed] = of_type(out, "recovery_failed")
    [alert] = of_type(out, "incident")
    assert failed.escalation == alert.id and alert.action == "alert"
    assert rec.state.jobs["llm"].state is JobState.FAILED and over(rec.state, "llm")
    assert over(refold(rec), "llm") and not over(rec.state, "no-such-job")
