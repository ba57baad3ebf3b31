"""A failed rank, loudly and with its cause (issue 33): `trainmedic run` says which rank ended how and
its last line (all of its tail with --no-tee); `job status` shows the job's last failure and tail."""

from __future__ import annotations

from tests.unit.coordinator.test_job_status import running, steps
from trainmedic.ops.jobs.failure import last_failure, rank_failure
from trainmedic.ops.jobs.status import StepHistory, job_status, render
from trainmedic.run.narrate import RunNarrator
from trainmedic.schemas.telemetry import WorkerExited

TAIL = ("Traceback (most recent call last):\n  File \"/w/train.py\", line 1, in <module>\n"
        "    import no_such_module\nModuleNotFoundError: No module named 'no_such_module'")
HEADLINE = "rank 1 exited with code 1: ModuleNotFoundError: No module named 'no_such_module'"


def exited(rank: int = 1, generation: int = 0, tail: str | None = TAIL, **fields) -> WorkerExited:
    return WorkerExited(ts=10.0, node="local-0", job="j", rank=rank, world_size=2, generation=generation,
                        output_tail=tail, **{"exit_code": 1, **fields})


def test_run_says_which_rank_failed_and_its_last_line() -> None:
    narrator = RunNarrator("j", started=0.0)
    assert narrator.event(exited(), 10.0) == [HEADLINE]
    assert narrator.event(exited(tail=None, exit_code=None, signal=9), 10.0) == [
        "rank 1 was killed by signal 9 (SIGKILL)"]


def test_without_the_tee_run_prints_the_whole_tail_indented() -> None:
    narrator = RunNarrator("j", started=0.0, tee=False)
    assert narrator.event(exited(), 10.0) == [HEADLINE, *(f"    {line}" for line in TAIL.splitlines())]


def test_clean_stopped_unknown_and_other_jobs_exits_are_no_failure() -> None:
    narrator = RunNarrator("j", started=0.0)
    for event in (exited(exit_code=0, tail=None), exited(stopped=True, signal=15, exit_code=None),
                  exited(exit_code=None, reason="adopted: exit status unknown"),
                  exited().model_copy(update={"job": "other"})):
        assert narrator.event(event, 10.0) == [], event


def test_what_a_rank_wrote_is_printed_escaped() -> None:
    failure = rank_failure(exited(tail="Error: \x1b]0;owned\x07\u202e"), "j")
    assert failure.headline() == "rank 1 exited with code 1: Error: \\x1b]0;owned\\x07\\u202e"


def test_job_status_shows_the_last_failure_and_the_end_of_its_tail() -> None:
    long_tail = "\n".join(f"line {n}" for n in range(30))
    events = [*steps(0, 0, 4, 1000.0), exited(rank=0, generation=0, tail="first"),
              exited(rank=1, generation=1, tail=long_tail), exited(rank=0, generation=1, signal=6,
                                                                   exit_code=None)]
    failure = last_failure("j", events)
    lines = render(job_status(running(), StepHistory.of("j", events), failure), 1010.0)
    at = lines.index("failure     generation 1: rank 1 exited with code 1: line 29 (on local-0)")
    assert lines[at + 1:] == [f"    line {n}" for n in range(20, 30)]
    assert not any("failure" in line for line in render(job_status(running(), StepHistory("j")), 0.0))
