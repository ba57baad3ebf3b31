"""A heap of deadlines with at most one live entry per (kind, key), so `advance` is cheap: entries are
lazy, re-armed when the true deadline moved, so only a node that stays quiet pops one.
"""

from __future__ import annotations

import heapq
from enum import IntEnum


class Timer(IntEnum):
    """Kinds of deadline; at equal times the lower value fires first, so a lost node is
    known before the job groups that wait for it are released."""

    NODE_LOST = 0
    RELEASE = 1
    HANG = 2
    STRAGGLER = 3
    LINK_STABLE = 4
    STORM = 5  # a node's or job's storm window is over (limits.py)


class Deadlines:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str]] = []
        self._armed: dict[tuple[int, str], float] = {}

    def arm(self, kind: Timer, key: str, when: float) -> None:
        """Make sure (kind, key) is checked no later than `when`."""
        slot = (kind, key)
        armed = self._armed.get(slot)
        if armed is not None and armed <= when:
            return
        self._armed[slot] = when
        heapq.heappush(self._heap, (when, kind, key))

    def pop_before(self, now: float) -> tuple[float, Timer, str] | None:
        """The earliest live entry strictly before `now`, removed; None when there is none.
        Strictly: an event stamped exactly at a deadline is seen before the deadline fires."""
        heap = self._heap
        while heap and heap[0][0] < now:
            when, kind, key = heapq.heappop(heap)
            if self._armed.get((kind, key)) == when:
                del self._armed[(kind, key)]
                return when, Timer(kind), key
        return None
