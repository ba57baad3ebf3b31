"""What `trainmedic run` prints while its job runs: the job's state as it changes, its steps (at most
one line per `every_s`), a rank that failed and its last words, incidents and recoveries (the demo's
narration). Pure: events and `now` in, lines out."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainmedic.demo.watch import narration
from trainmedic.ops.incidents.phases import describe
from trainmedic.ops.incidents.timing import RecoveryTimer
from trainmedic.ops.jobs.failure import rank_failure
from trainmedic.ops.jobs.status import StepHistory
from trainmedic.schemas.telemetry import WorkerEvent, WorkerStepped


@dataclass
class RunNarrator:
    job: str
    started: float  # when `trainmedic run` started, for the time to the first step
    every_s: float = 1.0
    tee: bool = True  # the ranks' output is printed as it is written: a failed rank's tail is already shown
    history: StepHistory = field(init=False)
    state: str | None = None
    first_step_at: float | None = None
    ran: set[int] = field(default_factory=set)  # generations any rank of the job reported from
    recoveries: RecoveryTimer = field(default_factory=RecoveryTimer)  # the phases of each recovery
    timed: set[str] = field(default_factory=set)  # incidents whose recovery by phase was printed
    _said_step: int | None = None
    _said_at: float = float("-inf")

    def __post_init__(self) -> None:
        self.history = StepHistory(self.job)

    def event(self, event: object, now: float, published: float | None = None) -> list[str]:
        """The lines `event` adds; `published`: when it reached Kafka (its message time)."""
        lines = []
        resumed = isinstance(event, WorkerStepped) and event.generation not in self.history.generations
        self.recoveries.apply(event, published)
        if isinstance(event, WorkerEvent) and event.job == self.job:
            self.ran.add(event.generation)
        if isinstance(event, WorkerStepped) and event.job == self.job:
            self.history.add(event)
            if self.first_step_at is None:
                self.first_step_at = now
                lines.append(f"first step {event.step} after {now - self.started:.1f} s")
            lines += self.progress(now)
            if resumed:
                lines += self.recovered()
        if (failure := rank_failure(event, self.job)) is not None:
            lines += [failure.headline(), *([] if self.tee else failure.shown_tail(len(failure.tail)))]
        said = narration(event, self.job)
        return [*lines, said] if said else lines

    def recovered(self) -> list[str]:
        """For each recovery of the job that just stepped again: where its seconds went."""
        lines = []
        for view, found in self.recoveries.timed(self.job):
            if view.id not in self.timed:
                self.timed.add(view.id)
                lines.append(f"recovered from {view.incident.category} by phase: {describe(found)}")
        return lines

    def progress(self, now: float, force: bool = False) -> list[str]:
        """The step line, when a new step came and `every_s` passed since the last one (or `force`)."""
        latest = self.history.latest
        if latest is None or latest.last_step == self._said_step or (now - self._said_at < self.every_s
                                                                       and not force):
            return []
        self._said_step, self._said_at = latest.last_step, now
        generation = max(self.history.generations)
        rate = "" if latest.rate is None else f" | {latest.rate:.2f} steps/s"
        return [f"step {latest.last_step}{rate} | generation {generation}, world size {latest.world_size}"]

    def job_state(self, state: str | None) -> list[str]:
        """A line when the coordinator's state of the job changed."""
        if state == self.state or state is None:
            return []
        self.state = state
        return [f"job {self.job}: {state}"]

    def summary(self, restarts: int) -> str:
        """The closing line: the generations that ran count those whose ranks never stepped."""
        generations = len(self.ran | set(self.history.generations))
        latest = self.history.latest
        steps = "no step" if latest is None else f"last step {latest.last_step}"
        warned = len(self.history.restore_warnings)
        return (f"job {self.job} {self.state}: {steps}, {counted(generations, 'generation')}, "
                f"{counted(restarts, 'restart')}, {counted(self.history.steps_lost, 'step')} lost"
                + (f", {counted(warned, 'restore')} fell back" if warned else ""))


def counted(count: int, noun: str) -> str:
    """`1 restart`, `2 restarts`."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
