"""`trainmedic job status`'s core: the folded job with its ranks' steps, steps lost across generations."""

from __future__ import annotations

from trainmedic.ops.jobs.status import StepHistory, job_status, render
from trainmedic.recovery.coordinator.core.state import Job, JobState
from trainmedic.schemas.jobs import JobSpec
from trainmedic.schemas.telemetry import WorkerStepped

SPEC = JobSpec(id="j", nodes=("a", "b"), throughput={1: 1.0, 2: 2.0}, command=("python", "t.py"),
               ranks_per_node=2)


def steps(generation: int, first: int, last: int, t0: float, ranks: int = 2, warning: str | None = None,
          job: str = "j") -> list[WorkerStepped]:
    """Each rank of `generation` reporting steps first..last, one a second from `t0`."""
    return [WorkerStepped(ts=t0 + (step - first), node="a", job=job, rank=rank, world_size=ranks,
                          generation=generation, step=step, step_time=1.0,
                          restore_warning=warning if step == first else None)
            for step in range(first, last + 1) for rank in range(ranks)]


def running(generation: int = 2, restarts: int = 1) -> Job:
    return Job(SPEC, state=JobState.RUNNING, generation=generation, nodes=("a", "b"),
               restarts=tuple((100.0 + i, f"inc-{i}") for i in range(restarts)))


def test_steps_rate_and_no_loss_when_each_generation_resumes_after_the_last_step() -> None:
    events = steps(0, 0, 9, 1000.0) + steps(1, 10, 19, 1020.0) + steps(2, 20, 49, 1040.0)
    status = job_status(running(), StepHistory.of("j", events))
    assert (status.state, status.generation, status.world_size, status.nodes) == ("running", 2, 4, ("a", "b"))
    assert (status.step, status.step_ts, status.restarts, status.steps_lost) == (49, 1069.0, 1, 0)
    assert status.step_rate == 1.0  # the latest generation: one step a second
    assert "step        49 (1.00 steps/s, last 1.0 s ago)" in render(status, now=1070.0)


def test_a_generation_that_starts_at_or_below_the_previous_last_step_lost_those_steps() -> None:
    # gen 1 restored step 5 (ran 5..9 again: 5 lost), gen 2 resumed cleanly, gen 3 restored from nothing
    events = (steps(0, 0, 9, 0.0) + steps(1, 5, 14, 20.0, warning="no replica snapshot of rank 1")
              + steps(2, 15, 20, 40.0) + steps(3, 0, 3, 60.0))
    status = job_status(running(generation=3, restarts=3), StepHistory.of("j", events))
    assert status.steps_lost == 5 + 0 + 21
    assert status.restore_warnings == ("generation 1, rank 0 on a: no replica snapshot of rank 1",
                                       "generation 1, rank 1 on a: no replica snapshot of rank 1")
    assert any(line.startswith("WARNING: restore fell back: generation 1") for line in render(status, 70.0))


def test_an_ended_job_says_why() -> None:
    ended = Job(SPEC, state=JobState.SUCCEEDED, generation=1,
                end_reason="every rank of generation 1 exited 0")
    assert "state       succeeded: every rank of generation 1 exited 0" in render(
        job_status(ended, StepHistory("j")), 0.0)


def test_other_jobs_steps_are_not_counted_and_a_job_without_steps_says_so() -> None:
    status = job_status(Job(SPEC), StepHistory.of("j", steps(0, 0, 5, 0.0, job="other")))
    assert (status.state, status.step, status.step_rate, status.steps_lost) == ("submitted", None, None, 0)
    assert "step        none reported yet" in render(status, 10.0)
    assert "generation  -" in render(status, 10.0)


def test_a_single_step_has_no_rate_and_steps_reported_out_of_order_keep_the_highest() -> None:
    events = steps(0, 3, 3, 10.0, ranks=1) + steps(0, 1, 1, 11.0, ranks=1)
    status = job_status(running(generation=0, restarts=0), StepHistory.of("j", events))
    assert (status.step, status.step_rate) == (3, None)


def test_the_latest_generation_says_where_its_ranks_took_their_state_from() -> None:
    from trainmedic.schemas import Restored

    first = steps(1, 10, 12, 20.0)
    earlier = [e.model_copy(update={"restored": Restored(kind="checkpoint", step=9, seconds=3.0)})
               for e in first if e.step == 10]
    latest = steps(2, 13, 14, 40.0)
    told = [e.model_copy(update={"restored": Restored(kind="replica", step=13, seconds=0.5 + e.rank,
                                                      read=10, received=5)})
            for e in latest if e.step == 13]
    events = [*first, *earlier, *latest, *told, told[0]]  # a report read twice counts once
    status = job_status(running(), StepHistory.of("j", events))
    assert status.restored == ("j generation 2: 2 ranks restored step 13 from replica snapshots (20 elements "
                               "read on their own nodes, 10 received from other nodes), slowest 1.50s")
    assert f"restored    {status.restored}" in render(status, 50.0)
    assert job_status(running(), StepHistory.of("j", steps(0, 0, 3, 0.0))).restored is None  # a fresh start
