"""`trainmedic run` and `job status --follow` fold the log as it comes (ops/jobs/view.py `JobWatch`): a
poll may bring the coordinator's plan and the job's end before the job's submission (another
topic's partition). Those wait for the submission and fold as the coordinator's log says. Before, the
plan was ignored ("names job ..., which was never submitted") and the watcher never saw the job end:
`trainmedic run` waited until it was stopped (test_in_process failed on it once in CI)."""

from __future__ import annotations

from tests.unit.coordinator.world import Recorder
from trainmedic.bus.message import Record
from trainmedic.ops.jobs.view import JobWatch
from trainmedic.recovery.coordinator.core.state import JobState
from trainmedic.recovery.coordinator.intake import log_state
from trainmedic.recovery.coordinator.migrate import ImplicitIsolations
from trainmedic.schemas import RanksFinished, encode


def watch() -> JobWatch:
    """A watcher without its reader: only its fold."""
    made = JobWatch.__new__(JobWatch)
    made.state, made.refused, made.rejected, made._held = log_state(None), [], {}, []
    made._upcast, made._jobs = ImplicitIsolations(), "p.jobs"
    return made


def records(rec: Recorder) -> list[Record]:
    return [Record(f"p.{suffix}", 0, n, None, event, encode(event))
            for n, ((suffix, _), event) in enumerate(rec.placed())]


def test_decisions_read_before_their_job_wait_for_it() -> None:
    rec = Recorder()
    rec.started(now=1.0)
    for command in (e for e in rec.log if e.type == "command"):
        rec.feed(RanksFinished(ts=5.0, node=command.node, job="llm", generation=0, ranks=(0, 1)), now=5.0)
    assert rec.state.jobs["llm"].state is JobState.SUCCEEDED
    log = records(rec)
    jobs = [r for r in log if r.topic == "p.jobs"]
    others = [r for r in log if r.topic != "p.jobs"]
    watcher = watch()
    watcher._fold(others)  # the first poll: everything but the submission
    assert "llm" not in watcher.state.jobs and watcher.refused == []
    watcher._fold(jobs)
    assert watcher.state.jobs["llm"].state is JobState.SUCCEEDED and watcher._held == []
