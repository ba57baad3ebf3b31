"""What `trainmedic run` prints while its job runs: the job's state as it changes, its steps (at most
one line per `every_s`), incidents and recoveries (the demo's narration). Pure: events and `now` in,
lines out."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainmedic.demo.watch import narration
from trainmedic.ops.jobs.status import StepHistory
from trainmedic.schemas.telemetry import WorkerStepped


@dataclass
class RunNarrator:
    job: str
    started: float  # when `trainmedic run` started, for the time to the first step
    every_s: float = 1.0
    history: StepHistory = field(init=False)
    state: str | None = None
    first_step_at: float | None = None
    _said_step: int | None = None
    _said_at: float = float("-inf")

    def __post_init__(self) -> None:
        self.history = StepHistory(self.job)

    def event(self, event: object, now: float) -> list[str]:
        lines = []
        if isinstance(event, WorkerStepped) and event.job == self.job:
            self.history.add(event)
            if self.first_step_at is None:
                self.first_step_at = now
                lines.append(f"first step {event.step} after {now - self.started:.1f} s")
            lines += self.progress(now)
        said = narration(event, self.job)
        return [*lines, said] if said else lines

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
        latest = self.history.latest
        steps = "no step" if latest is None else f"last step {latest.last_step}"
        warned = len(self.history.restore_warnings)
        return (f"job {self.job} {self.state}: {steps}, {len(self.history.generations)} generations, "
                f"{restarts} restarts, {self.history.steps_lost} steps lost"
                + (f", {warned} restores fell back" if warned else ""))
