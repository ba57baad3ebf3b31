"""Where the ranks of each job generation took their state from, summed up from the first step each
rank reported after its restore (`WorkerStepped.restored`): what the incident log, `trainmedic job
status` and the demo print. Pure."""

from __future__ import annotations

from collections.abc import Collection
from typing import NamedTuple

from trainmedic.schemas.telemetry import WorkerStepped


class Restore(NamedTuple):
    """Where the ranks of one (job, generation) took their state from: the `kinds` of source
    ("replica", "checkpoint"), the `steps` restored, the elements of sharded state read on the
    ranks' own nodes and received from others (None: whole states, not counted), the slowest
    rank's seconds; `ts`: the first of their first steps."""

    job: str
    generation: int
    ts: float
    ranks: int
    kinds: tuple[str, ...]
    steps: tuple[int, ...]
    read: int | None
    received: int | None
    slowest_s: float

    def describe(self) -> str:
        moved = ("" if self.read is None else
                 f" ({self.read:,} elements read on their own nodes, {self.received or 0:,} received "
                 f"from other nodes)")
        steps = f"step{'s' * (len(self.steps) > 1)} {', '.join(str(s) for s in self.steps)}"
        sources = " and ".join("replica snapshots" if kind == "replica" else kind for kind in self.kinds)
        return (f"{self.job} generation {self.generation}: {self.ranks} rank{'s' * (self.ranks != 1)} "
                f"restored {steps} from {sources}{moved}, slowest {self.slowest_s:.2f}s")


def restores(steps: Collection[WorkerStepped]) -> tuple[Restore, ...]:
    """One `Restore` per (job, generation) of `steps` (first steps that carry `restored`)."""
    by_generation: dict[tuple[str, int], list[WorkerStepped]] = {}
    for step in steps:
        by_generation.setdefault((step.job, step.generation), []).append(step)
    out = []
    for (job, generation), group in sorted(by_generation.items()):
        done = [s.restored for s in group]
        counted = [r for r in done if r.read is not None]
        out.append(Restore(
            job, generation, min(s.ts for s in group), len(group), tuple(sorted({r.kind for r in done})),
            tuple(sorted({r.step for r in done})), sum(r.read for r in counted) if counted else None,
            sum(r.received or 0 for r in counted) if counted else None, max(r.seconds for r in done)))
    return tuple(out)
