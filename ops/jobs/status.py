"""A job's status as `trainmedic job status` prints it: the coordinator's fold of the job with its
ranks' progress from worker telemetry (step, step rate, restarts, steps lost, restores). Pure: events
and `now` in (docs/run.md#trainmedic-job-status-job)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from trainmedic.ops.jobs.failure import RankFailure
from trainmedic.recovery.coordinator.core.state import Job
from trainmedic.schemas.printable import terminal_safe
from trainmedic.schemas.restores import restores
from trainmedic.schemas.telemetry import WorkerStepped

RATE_STEPS = 20  # the step rate is over the latest generation's last this many steps


@dataclass
class GenerationSteps:
    """The steps one generation of a job completed, as any of its ranks first reported each."""

    world_size: int
    first_step: int
    last_step: int
    recent: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=RATE_STEPS))

    def add(self, step: int, ts: float) -> None:
        self.first_step = min(self.first_step, step)
        if step > self.last_step or not self.recent:
            self.last_step = step
            self.recent.append((step, ts))

    @property
    def last_ts(self) -> float:
        return self.recent[-1][1]

    @property
    def rate(self) -> float | None:
        """Steps per second over the recent steps; None with fewer than two."""
        if len(self.recent) < 2:
            return None
        (first, began), (last, ended) = self.recent[0], self.recent[-1]
        return (last - first) / (ended - began) if ended > began else None


@dataclass
class StepHistory:
    """A job's steps per generation, the restore warnings its ranks reported, and each rank's
    first step that said where its state came from, by (generation, rank).

    Steps lost are counted where they show: a generation whose first step is at or below the previous
    generation's last completed step ran those steps again (a restore from an older state than the
    newest). A rank whose restore fell back from the replica it was told to use says so in
    `restore_warning` on its first step."""

    job: str
    generations: dict[int, GenerationSteps] = field(default_factory=dict)
    restore_warnings: list[str] = field(default_factory=list)
    restored: dict[tuple[int, int], WorkerStepped] = field(default_factory=dict)

    @classmethod
    def of(cls, job: str, events: Iterable[object]) -> StepHistory:
        """The history of `job` in `events` (other events and other jobs' steps are skipped)."""
        history = cls(job)
        for event in events:
            if isinstance(event, WorkerStepped):
                history.add(event)
        return history

    def add(self, event: WorkerStepped) -> None:
        if event.job != self.job:
            return
        gen = self.generations.get(event.generation)
        if gen is None:
            gen = GenerationSteps(event.world_size, event.step, event.step)
            self.generations[event.generation] = gen
        gen.add(event.step, event.ts)
        if event.restore_warning:
            self.restore_warnings.append(f"generation {event.generation}, rank {event.rank} on {event.node}: "
                                         f"{event.restore_warning}")
        if event.restored is not None:
            self.restored.setdefault((event.generation, event.rank), event)

    @property
    def steps_lost(self) -> int:
        """Completed steps that a later generation ran again, summed over each generation change."""
        ordered = [self.generations[g] for g in sorted(self.generations)]
        return sum(max(0, before.last_step + 1 - after.first_step)
                   for before, after in zip(ordered, ordered[1:], strict=False))

    @property
    def latest(self) -> GenerationSteps | None:
        return self.generations[max(self.generations)] if self.generations else None

    @property
    def latest_restore(self) -> str | None:
        """Where the latest generation's ranks took their state from (None: it restored nothing)."""
        if not self.generations:
            return None
        newest = max(self.generations)
        done = restores([s for (gen, _), s in self.restored.items() if gen == newest])
        return done[0].describe() if done else None


@dataclass(frozen=True)
class JobStatus:
    """What `trainmedic job status` prints."""

    job: str
    state: str
    end_reason: str  # why it ended, once it did
    generation: int | None
    world_size: int
    nodes: tuple[str, ...]
    step: int | None
    step_ts: float | None
    step_rate: float | None
    restarts: int
    steps_lost: int
    restore_warnings: tuple[str, ...]
    restored: str | None = None  # where the latest generation's ranks took their state from
    failure: RankFailure | None = None  # the job's last failed rank, with its last lines


def job_status(job: Job, history: StepHistory, failure: RankFailure | None = None) -> JobStatus:
    """`job` as the fold has it, with the progress its ranks reported (`history`) and its last failure."""
    latest = history.latest
    return JobStatus(
        job=job.spec.id, state=str(job.state.value), end_reason=job.end_reason, generation=job.generation,
        world_size=len(job.nodes) * job.spec.ranks_per_node, nodes=job.nodes,
        step=None if latest is None else latest.last_step, step_ts=None if latest is None else latest.last_ts,
        step_rate=None if latest is None else latest.rate, restarts=len(job.restarts),
        steps_lost=history.steps_lost, restore_warnings=tuple(history.restore_warnings),
        restored=history.latest_restore, failure=failure,
    )


def render(status: JobStatus, now: float) -> list[str]:
    """The status as `name  value` lines, terminal-safe (warnings and reasons are ranks' text)."""
    if status.step is None:
        step = "none reported yet"
    else:
        rate = "" if status.step_rate is None else f"{status.step_rate:.2f} steps/s, "
        ago = max(0.0, now - (status.step_ts or now))
        step = f"{status.step} ({rate}last {ago:.1f} s ago)"
    lines = [
        ("job", status.job),
        ("state", f"{status.state}: {status.end_reason}" if status.end_reason else status.state),
        ("generation", "-" if status.generation is None else str(status.generation)),
        ("world size", str(status.world_size)),
        ("nodes", " ".join(status.nodes) or "-"),
        ("step", step),
        ("restarts", str(status.restarts)),
        ("steps lost", str(status.steps_lost)),
    ]
    if status.restored:
        lines.append(("restored", status.restored))
    out = [f"{name:11} {value}" for name, value in lines]
    out += [f"WARNING: restore fell back: {warning}" for warning in status.restore_warnings]
    if (failure := status.failure) is not None:
        out += [f"{'failure':11} generation {failure.generation}: {failure.headline()} (on {failure.node})",
                *failure.shown_tail()]
    return [terminal_safe(line) for line in out]
