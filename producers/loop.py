"""The sampling loop: a fixed-rate tick that never drifts, never piles up, and stops when told."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


def next_deadline(deadline: float, interval_s: float, now: float) -> tuple[float, int]:
    """The first deadline after `now` on the grid `deadline + k * interval_s`, and how many were missed."""
    following = deadline + interval_s
    if following > now:
        return following, 0
    missed = int((now - following) // interval_s) + 1
    return following + missed * interval_s, missed


def run_every(
    interval_s: float, tick: Callable[[float], None], stop: threading.Event, *,
    monotonic: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
) -> None:
    """Call `tick(wall time)` every `interval_s` until `stop` is set; a late tick skips, never bunches."""
    deadline = monotonic()
    while not stop.is_set():
        tick(wall())
        deadline, missed = next_deadline(deadline, interval_s, monotonic())
        if missed:
            log.warning("a round took longer than the %.3gs interval: %d rounds skipped", interval_s, missed)
        stop.wait(max(0.0, deadline - monotonic()))
