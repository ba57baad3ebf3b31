"""Whether a healed run trained as if nothing had happened: the losses rank 0 of every generation
logged, step by step, against an uninterrupted run's (`steps_lost` is the demo's other check; docs/demo.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

STEP = re.compile(r"^step (\d+) loss (\S+) gen (\d+) rank 0 ", re.M)  # nan and inf too
TOLERANCE = 1e-4  # the runs differ only in the order of float sums (world sizes, reshards)


@dataclass(frozen=True)
class LossCheck:
    """`steps` logged (a step run by two generations counts twice) by `generations`; the largest
    difference from the reference and its step; the generations that stepped but logged nothing."""

    steps: int
    generations: int
    max_abs_diff: float
    worst_step: int | None
    silent: tuple[int, ...] = ()

    @property
    def matches(self) -> bool:
        return self.steps > 0 and self.max_abs_diff <= TOLERANCE and not self.silent

    def describe(self) -> str:
        if not self.steps:
            return "losses: rank 0 logged no step"
        silent = f"; no loss logged by generation {', '.join(map(str, self.silent))}" if self.silent else ""
        return (f"losses: {self.steps} steps of {self.generations} generations, largest difference from an "
                f"uninterrupted run {self.max_abs_diff:.1e} (step {self.worst_step}){silent}: "
                f"{'MATCH' if self.matches else 'DO NOT MATCH'} (tolerance {TOLERANCE:g})")

    def as_dict(self) -> dict:
        return {**asdict(self), "matches": self.matches}


def logged(logs: Iterable[Path]) -> dict[tuple[int, int], float]:
    """(generation, step) -> loss, from rank 0's logs."""
    found = {}
    for path in logs:
        for step, loss, gen in STEP.findall(path.read_text(errors="replace")):
            found[int(gen), int(step)] = float(loss)
    return found


def compare(losses: dict[tuple[int, int], float], reference: list[float],
            stepped: Collection[int] = ()) -> LossCheck:
    """`losses` against `reference` (the loss of each step from 0); a step past it, or a loss or
    difference that is not finite, is a failure, and so is a generation of `stepped` (those seen
    stepping) that logged none."""
    worst, worst_step = 0.0, None
    for (_, step), loss in losses.items():
        diff = abs(loss - reference[step]) if step < len(reference) else math.inf
        diff = diff if math.isfinite(diff) else math.inf
        if worst_step is None or diff > worst:
            worst, worst_step = diff, step
    logged_by = {gen for gen, _ in losses}
    return LossCheck(len(losses), len(logged_by), worst, worst_step, tuple(sorted(set(stepped) - logged_by)))


def reference(model: str, until: int) -> Iterator[float]:
    """The demo's `model` (`trainmedic.demo.MODELS`) trained uninterrupted in this process: the loss
    of every step from 0 to `until` (FSDP2 and HSDP shard the same transformer: one reference)."""
    from trainmedic.demo import gpt, mlp

    return (gpt if model.startswith("gpt") else mlp).reference_losses(until)
