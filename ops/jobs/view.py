"""`trainmedic job status` and `trainmedic job logs` against Kafka: the log folded as `job list` folds
it with the job's worker telemetry, and the ranks' output on this machine (escaped, never obeyed),
followed until the job ends (docs/run.md)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from trainmedic.bus.message import Record
from trainmedic.bus.reader import EARLIEST, NOW, TopicReader, partition_count, partition_of
from trainmedic.bus.settings import KafkaSettings
from trainmedic.ops.jobs.failure import last_failure
from trainmedic.ops.jobs.states import JobLog, started, state_text
from trainmedic.ops.jobs.status import StepHistory, job_status, render
from trainmedic.recovery.coordinator.core.config import CoordinatorConfig
from trainmedic.recovery.coordinator.core.state import ClusterState
from trainmedic.recovery.coordinator.intake import log_state, rebuild
from trainmedic.recovery.coordinator.kafka_adapter import read_topics, valid
from trainmedic.recovery.coordinator.migrate import ImplicitIsolations
from trainmedic.recovery.executor import rank_logs
from trainmedic.schemas.commands import RanksFinished
from trainmedic.schemas.jobs import JobSubmitted
from trainmedic.schemas.printable import terminal_safe
from trainmedic.schemas.recovery import (
    JobEnded,
    RecoveryCompleted,
    RecoveryFailed,
    RecoveryPlanned,
    RecoverySkipped,
)
from trainmedic.schemas.telemetry import WorkerExited, WorkerStepped

UNKNOWN = 2  # exit status for a job the log does not know
# What the fold ignores for a job not submitted (yet, for a watcher reading the jobs topic late): held
# until it is, at most this many (a log naming jobs never submitted keeps its newest).
HELD_KINDS = (RecoveryPlanned, RecoveryCompleted, RecoveryFailed, RecoverySkipped, JobEnded, RanksFinished)
MAX_HELD = 10_000


def over(state: ClusterState, job: str) -> bool:
    """Whether following `job` is done: it ended (`job_ended`; a job the coordinator gave up on ends
    `failed`); a job failed otherwise waits for its re-plan."""
    found = state.jobs.get(job)
    return found is not None and found.closed


class JobWatch:
    """The coordinator's log (and `extra` topics) read from the beginning and on, folded as it comes:
    what `job list` shows, kept current. `poll` returns what it read, for a caller that narrates."""

    def __init__(self, settings: KafkaSettings, config: CoordinatorConfig | None = None,
                 extra: tuple[str, ...] = ()) -> None:
        self.state = log_state(config)
        self.refused: list[tuple[Record, str]] = []
        self._held: list[Record] = []  # records about a job whose submission was not read yet
        self.rejected: dict[str, str] = {}  # job -> why the coordinator rejected its submission
        self._upcast = ImplicitIsolations()  # one for every part it reads: an old decision and its incident
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
        """Fold `records` (the jobs topic's first), and those held from polls before: a decision about
        a job whose submission was not read yet (the jobs topic's partition may come in a later poll
        than the coordinator's plan) waits for it, as the coordinator's own fold would have it."""
        jobs = [r for r in records if r.topic == self._jobs]
        self.refused += rebuild(self.state, jobs, self._upcast)
        waiting = [*self._held, *(r for r in records if r.topic != self._jobs)]
        self._held = [r for r in waiting if self._early(r)][-MAX_HELD:]
        held = {id(r) for r in self._held}
        self.refused += rebuild(self.state, [r for r in waiting if id(r) not in held], self._upcast)
        self.rejected.update((r.event.job, r.event.reason) for r in records
                             if isinstance(r.event, JobEnded) and r.event.state == "rejected")
        return records

    def _early(self, record: Record) -> bool:
        """A decision or report about a job not submitted as far as read (rejections excepted)."""
        event = record.event
        return (isinstance(event, HELD_KINDS) and event.job not in self.state.jobs
                and not (isinstance(event, JobEnded) and event.state == "rejected"))

    def refused_job(self, job: str) -> str | None:
        """Why the submission of `job` was not folded (the coordinator refuses it too), or why the
        coordinator rejected it, if either."""
        if job in self.rejected and not started(self.state, job):
            return self.rejected[job]
        return next((why for record, why in self.refused
                     if isinstance(record.event, JobSubmitted) and record.event.job.id == job), None)

    def submission(self, job: str) -> str | None:
        """Which submission of `job` the log holds (its rank files are named by it)."""
        found = self.state.jobs.get(job)
        return found.submission if found is not None else None

    def job_state(self, job: str) -> str | None:
        found = self.state.jobs.get(job)
        return None if found is None else str(found.state.value)

    def over(self, job: str) -> bool:
        return over(self.state, job)


def read_worker(settings: KafkaSettings, job: str) -> list[WorkerStepped | WorkerExited]:
    """The `worker_step` and `worker_exit` events of `job` so far (telemetry.worker is keyed by job: one
    partition)."""
    topic = settings.topics.worker
    part = partition_of(job, partition_count(settings, topic))
    with TopicReader(settings, partitions=[(topic, part)], end=NOW, validate=True,
                     name=settings.topics.owned("job")) as reader:
        return [r.event for batch in reader.batches(give_up_s=60.0) for r in valid(batch)
                if isinstance(r.event, WorkerStepped | WorkerExited) and r.event.job == job]


def show_status(settings: KafkaSettings, log: JobLog, job: str) -> int:
    """Print `job` as the folded `log` has it, with its progress read from worker telemetry."""
    found = log.displayed(job)
    if found is None:
        known = ", ".join(sorted(log.state.jobs)[:10]) or "none"
        print(f"trainmedic job: no job {job!r} in the log of {settings.topics.jobs} (jobs: {known})",
              file=sys.stderr)
        return UNKNOWN
    events = read_worker(settings, job)
    now = time.time()
    status = job_status(found, StepHistory.of(job, events), last_failure(job, events))
    for line in render(replace(status, state=state_text(log, found, now)), now):
        print(line)
    return 0


def no_logs(home: Path, job: str) -> str:
    return (f"no logs of job {job} on this machine (looked in {rank_logs.job_logs_glob(home, job)}): "
            f"a rank's output stays on the node that ran it; run `trainmedic job logs {job}` there "
            f"(--home: that node's TRAINMEDIC_HOME)")


def show_logs(settings: KafkaSettings, home: Path, job: str, rank: int | None) -> int:
    """Print the job's rank logs on this machine, of its newest submission here (read without the
    broker); where there are none, the log says whether the job is known (1: its ranks ran
    elsewhere) or not (2, as `status` and `--follow` answer)."""
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
            submission = watch.submission(job)  # this deployment's, never another run of the job id
            while True:
                for line in tail.read(rank_logs.find(home, job, rank, submission)):
                    emit(terminal_safe(line))
                if watch.over(job):
                    break
                watch.poll(poll_s)
            for line in [*tail.read(rank_logs.find(home, job, rank, submission)), *tail.rest()]:
                emit(terminal_safe(line))
    except KeyboardInterrupt:
        return 130
    if not tail.offsets:
        print(f"trainmedic job: {no_logs(home, job)}", file=sys.stderr)
        return 1
    print(f"trainmedic job: job {job} ended: {watch.job_state(job)}", file=sys.stderr)
    return 0
