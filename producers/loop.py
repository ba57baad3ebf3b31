"""The sampling loop: a fixed-rate tick that never drifts, never piles up, and stops when told; between
ticks, optionally, a short poll for what must not wait for the next tick (a GPU's Xid)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

BETWEEN_S = 0.05  # how often `between` is called while a loop waits for its next tick


def next_deadline(deadline: float, interval_s: float, now: float) -> tuple[float, int]:
    """The first deadline after `now` on the grid `deadline + k * interval_s`, and how many were missed."""
    following = deadline + interval_s
    if following > now:
        return following, 0
    missed = int((now - following) // interval_s) + 1
    return following + missed * interval_s, missed


def run_every(
    interval_s: float, tick: Callable[[float], None], stop: threading.Event, *,
    between: Callable[[float], None] | None = None, between_s: float = BETWEEN_S,
    monotonic: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
) -> None:
    """Call `tick(wall time)` every `interval_s` until `stop` is set; a late tick skips, never bunches.
    While it waits for the next tick, `between(wall time)` (if given) is called every `between_s`."""
    deadline = monotonic()
    while not stop.is_set():
        tick(wall())
        deadline, missed = next_deadline(deadline, interval_s, monotonic())
        if missed:
            log.warning("a round took longer than the %.3gs interval: %d rounds skipped", interval_s, missed)
        while not stop.wait(max(0.0, min(deadline - monotonic(), between_s if between else interval_s))):
            if monotonic() >= deadline:
                break
            if between is not None:
                between(wall())
