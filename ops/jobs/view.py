"""`trainmedic job status` and `trainmedic job logs` against Kafka: the log folded as `job list` folds
it with the job's worker telemetry, and the ranks' output on this machine (escaped, never obeyed),
followed until the job ends (docs/run.md)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from trainmedic.bus.message import Record
from trainmedic.bus.reader import EARLIEST, NOW, TopicReader, partition_count, partition_of
from trainmedic.bus.settings import KafkaSettings
from trainmedic.ops.jobs.status import StepHistory, job_status, render
from trainmedic.recovery.coordinator.core.config import CoordinatorConfig
from trainmedic.recovery.coordinator.core.decide import gave_up_id
from trainmedic.recovery.coordinator.core.state import ClusterState, JobState
from trainmedic.recovery.coordinator.intake import log_state, rebuild
from trainmedic.recovery.coordinator.kafka_adapter import read_topics, valid
from trainmedic.recovery.executor import rank_logs
from trainmedic.schemas.jobs import JobSubmitted
from trainmedic.schemas.printable import terminal_safe
from trainmedic.schemas.telemetry import WorkerStepped

UNKNOWN = 2  # exit status for a job the log does not know


def over(state: ClusterState, job: str) -> bool:
    """Whether following `job` is done: it ended, or it failed and the coordinator gave up on it (its
    give-up alert for the job's generation is in the log); a job failed otherwise waits for its re-plan."""
    found = state.jobs.get(job)
    if found is None:
        return False
    return found.state.ended or (found.state is JobState.FAILED and gave_up_id(found) in state.incidents)


class JobWatch:
    """The coordinator's log (and `extra` topics) read from the beginning and on, folded as it comes:
    what `job list` shows, kept current. `poll` returns what it read, for a caller that narrates."""

    def __init__(self, settings: KafkaSettings, config: CoordinatorConfig | None = None,
                 extra: tuple[str, ...] = ()) -> None:
        self.state = log_state(config)
        self.refused: list[tuple[Record, str]] = []
        self._jobs = settings.topics.jobs
        self._reader = TopicReader(settings, [*read_topics(settings.topics), *extra], start=EARLIEST,
                                   validate=True, name=settings.topics.owned("job"), timeout_s=30.0)

    def __enter__(self) -> JobWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self._reader.close()

    def backlog(self) -> list[Record]:
        """Everything written so far, folded."""
        return self._fold(valid(item for batch in self._reader.batches(give_up_s=60.0) for item in batch))

    def poll(self, timeout_s: float) -> list[Record]:
        return self._fold(valid(self._reader.poll(timeout_s)))

    def _fold(self, records: list[Record]) -> list[Record]:
        self.refused += rebuild(self.state, sorted(records, key=lambda r: r.topic != self._jobs))
        return records

    def refused_job(self, job: str) -> str | None:
        """Why the submission of `job` was not folded (the coordinator refuses it too), if it was not."""
        return next((why for record, why in self.refused
                     if isinstance(record.event, JobSubmitted) and record.event.job.id == job), None)

    def job_state(self, job: str) -> str | None:
        found = self.state.jobs.get(job)
        return None if found is None else str(found.state.value)

    def over(self, job: str) -> bool:
        return over(self.state, job)


def read_steps(settings: KafkaSettings, job: str) -> list[WorkerStepped]:
    """The `worker_step` events of `job` so far (telemetry.worker is keyed by job: one partition)."""
    topic = settings.topics.worker
    part = partition_of(job, partition_count(settings, topic))
    with TopicReader(settings, partitions=[(topic, part)], end=NOW, validate=True,
                     name=settings.topics.owned("job")) as reader:
        return [r.event for batch in reader.batches(give_up_s=60.0) for r in valid(batch)
                if isinstance(r.event, WorkerStepped) and r.event.job == job]


def show_status(settings: KafkaSettings, state: ClusterState, job: str) -> int:
    """Print `job` as the folded `state` has it, with its progress read from worker telemetry."""
    found = state.jobs.get(job)
    if found is None:
        known = ", ".join(sorted(state.jobs)[:10]) or "none"
        print(f"trainmedic job: no job {job!r} in the log of {settings.topics.jobs} (jobs: {known})",
              file=sys.stderr)
        return UNKNOWN
    for line in render(job_status(found, StepHistory.of(job, read_steps(settings, job))), time.time()):
        print(line)
    return 0


def no_logs(home: Path, job: str) -> str:
    return (f"no logs of job {job} on this machine (looked in {rank_logs.job_logs_glob(home, job)}): "
            f"a rank's output stays on the node that ran it; run `trainmedic job logs {job}` there "
            f"(--home: that node's TRAINMEDIC_HOME)")


def show_logs(settings: KafkaSettings, home: Path, job: str, rank: int | None) -> int:
    """Print the job's rank logs on this machine; where there are none, the log says whether the job
    is known (1: its ranks ran elsewhere) or not (2, as `status` and `--follow` answer)."""
    logs = rank_logs.find(home, job, rank)
    if not logs:
        with JobWatch(settings) as watch:
            watch.backlog()
            if watch.job_state(job) is None:
                print(f"trainmedic job: no job {job!r} in the log of {settings.topics.jobs}", file=sys.stderr)
                return UNKNOWN
        print(f"trainmedic job: {no_logs(home, job)}", file=sys.stderr)
        return 1
    for line in rank_logs.interleaved(logs):
        print(terminal_safe(line))
    return 0


def follow_logs(settings: KafkaSettings, home: Path, job: str, rank: int | None,
                emit: Callable[[str], None] = print, poll_s: float = 0.5) -> int:
    """Print the job's rank logs as they grow until the job ends (then 0; 1 when none were on this
    machine) or Ctrl-C (130). A `failed` job has not always ended: a plan that failed escalates, and
    the escalation's re-plan usually heals it a moment later (FAILED → RECOVERING); see `over`."""
    tail = rank_logs.Tail()
    try:
        with JobWatch(settings) as watch:
            watch.backlog()
            if watch.job_state(job) is None:
                print(f"trainmedic job: no job {job!r} in the log of {settings.topics.jobs}", file=sys.stderr)
                return UNKNOWN
            while True:
                for line in tail.read(rank_logs.find(home, job, rank)):
                    emit(terminal_safe(line))
                if watch.over(job):
                    break
                watch.poll(poll_s)
            for line in [*tail.read(rank_logs.find(home, job, rank)), *tail.rest()]:
                emit(terminal_safe(line))
    except KeyboardInterrupt:
        return 130
    if not tail.offsets:
        print(f"trainmedic job: {no_logs(home, job)}", file=sys.stderr)
        return 1
    print(f"trainmedic job: job {job} ended: {watch.job_state(job)}", file=sys.stderr)
    return 0
