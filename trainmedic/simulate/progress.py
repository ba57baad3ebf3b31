"""One job's progress over simulated time, and where the time it did not train went, in the job's
nominal GPU-seconds so that the books balance (docs/simulation.md, "The model").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from trainmedic.simulate.scenario import JobModel


class Down(StrEnum):
    """Why a job does not train; each is a column of lost GPU-hours in the report."""

    DETECTION = "detection"  # the fault happened; nobody has noticed yet, or a decision is due
    RESTART = "restart"  # restarting and initialising, restoring state, or backing off before that
    REPAIR_WAIT = "repair_wait"  # not enough healthy nodes: waiting for repairs
    PERSON = "person"  # the healer gave up (or holds back past its cap): waiting for a person


LOSSES = ("detection", "restart", "recomputation", "checkpoint", "shrunk", "repair_wait", "person")
"""Every way a job's nominal GPU-time is lost, in report order."""


class Restore(StrEnum):
    REPLICA = "replica"  # the last step boundary before the fault
    CHECKPOINT = "checkpoint"  # the last completed checkpoint


@dataclass
class JobProgress:
    """The books of one job; `advance(now)` before every change, time only moves forward."""

    model: JobModel
    table: dict[int, float]  # nodes -> FLOP/s
    gpus_per_node: int
    now: float = 0.0
    size: int = 0  # nodes it runs on; 0 while down
    down: Down | None = None
    work: float = 0.0  # FLOP done and kept
    saved: float = 0.0  # FLOP in the last completed checkpoint
    phase_s: float = 0.0  # running time since the last checkpoint (or restore from one)
    step_s: float = 0.0  # running time since the last step boundary
    lost_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(LOSSES, 0.0))
    faults: int = 0
    stopped_rate: float = 0.0  # FLOP/s of the step in progress when it stopped
    resumed: list[float] = field(default_factory=list)  # when it ran again after each stop
    steps: int = 0  # steps its current generation completed
    first_step: float | None = None  # when the first of them completed

    @classmethod
    def running(cls, model: JobModel, table: dict[int, float], gpus_per_node: int, now: float) -> JobProgress:
        return cls(model=model, table=table, gpus_per_node=gpus_per_node, now=now, size=model.nodes)

    @property
    def nominal_gpus(self) -> int:
        return self.model.nodes * self.gpus_per_node

    @property
    def full(self) -> float:
        """FLOP/s at the asked-for size: goodput and losses are counted in its time."""
        return self.table[self.model.nodes]

    @property
    def is_running(self) -> bool:
        return self.down is None

    def advance(self, now: float) -> None:
        """Account for the time up to `now` in the current state."""
        dt = now - self.now
        if dt < 0:
            raise ValueError(f"job {self.model.id}: time went back from {self.now} to {now}")
        self.now = now
        if dt == 0:
            return
        if self.down is not None:
            self.lost_s[self.down] += dt
            return
        rate = self.table[self.size]
        self.lost_s["shrunk"] += dt * (1.0 - rate / self.full)
        interval, cost = self.model.checkpoint.interval_s, self.model.checkpoint.cost_s
        left = dt
        while left > 0:
            if self.phase_s < interval:  # training
                run = min(left, interval - self.phase_s)
                self.work += rate * run
                self._step(now - left, run)
            else:  # writing a checkpoint
                run = min(left, interval + cost - self.phase_s)
                self.lost_s["checkpoint"] += run * rate / self.full
            self.phase_s += run
            left -= run
            if self.phase_s >= interval + cost:
                self.saved, self.phase_s = self.work, 0.0

    def _step(self, start: float, run: float) -> None:
        """Training from `start` for `run` seconds: the steps it completes."""
        done = int((self.step_s + run) // self.model.step_s)
        if done and self.first_step is None:
            self.first_step = start + self.model.step_s - self.step_s
        self.steps += done
        self.step_s = (self.step_s + run) % self.model.step_s

    def stop(self, now: float, why: Down = Down.DETECTION) -> bool:
        """A fault stops the job; False (nothing changes) when it was not running."""
        self.advance(now)
        if self.down is not None:
            return False
        self._halt(why)
        self.faults += 1
        return True

    def _halt(self, why: Down) -> None:
        self.stopped_rate = self.table[self.size]
        self.down, self.size = why, 0

    def wait(self, now: float, why: Down) -> None:
        """A job that is down waits for another reason from `now` on."""
        self.advance(now)
        if self.down is None:
            raise ValueError(f"job {self.model.id} is running: it does not wait")
        self.down = why

    def resume(self, now: float, size: int, restore: Restore, *, new_generation: bool = True) -> None:
        """Running again at `size`, its state from `restore`: the work since then is lost and redone. A
        new generation counts its steps from none (a reattempt goes on with the same processes)."""
        self.advance(now)
        if self.down is None:
            raise ValueError(f"job {self.model.id} is running: it cannot resume")
        if size not in self.table:
            raise ValueError(f"job {self.model.id} cannot run at {size} nodes (sizes: {sorted(self.table)})")
        if restore is Restore.CHECKPOINT:
            kept, self.phase_s = self.saved, 0.0
        else:  # the step in progress at the fault is done again; the checkpoint schedule goes on
            kept = self.work - self.stopped_rate * self.step_s
        self.lost_s["recomputation"] += max(0.0, self.work - kept) / self.full
        self.work, self.step_s = kept, 0.0
        self.down, self.size = None, size
        self.resumed.append(now)
        if new_generation:
            self.steps, self.first_step = 0, None

    def reconfigure(self, now: float, why: Down = Down.RESTART) -> None:
        """A planned move of a running job (grow or shrink without a fault): it stops for the move."""
        self.advance(now)
        if self.down is None:
            self._halt(why)

    def gpu_hours(self) -> tuple[float, dict[str, float]]:
        """(goodput, losses by cause) in nominal GPU-hours."""
        scale = self.nominal_gpus / 3600.0
        return self.work / self.full * scale, {cause: s * scale for cause, s in self.lost_s.items()}

    def weighted_work(self) -> float:
        """The job's share of the accumulated WAF: weight × FLOP done and kept."""
        return self.model.weight * self.work


def default_table(model: JobModel, gpus_per_node: int, *, max_sizes: int = 16) -> dict[int, float]:
    """The job's throughput table: its own, else FLOP/s per GPU × GPUs at up to `max_sizes` sizes from
    min_nodes to nodes (linear scaling: what a data-parallel job loses when shrunk is its GPUs)."""
    if model.throughput is not None:
        return dict(model.throughput)
    low = model.min_nodes or model.nodes
    count = min(max_sizes, model.nodes - low + 1)
    sizes = {model.nodes} if count == 1 else {
        round(low + i * (model.nodes - low) / (count - 1)) for i in range(count)}
    return {n: n * gpus_per_node * model.flops_per_gpu for n in sorted(sizes)}

