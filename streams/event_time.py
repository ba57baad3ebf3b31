"""How far an event's own clock is believed: the one bound every engine applies before a `ts` enters
event time; pure, the stamp and the wall time passed in (docs/streams.md, "Bounded clocks";
docs/security.md, "Time is the broker's").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class Skewed:
    """An event whose clock is out of bounds: `used_at` is the time to use it at, None when it is
    refused; `reason` (one line, starting `clock_skew:`) goes with its dead letter."""

    direction: Literal["ahead", "behind"]
    used_at: float | None
    reason: str


@dataclass(frozen=True, slots=True)
class ClockBound:
    """`ahead_s`: how far a `ts` may be ahead of its stamp or of the wall clock; `behind_s`: how far
    behind its stamp before it is used at the stamp instead."""

    ahead_s: float
    behind_s: float

    @classmethod
    def of(cls, config) -> ClockBound:
        """The bound a `LiveConfig` (`max_ahead_s`, `max_skew_s`) sets."""
        return cls(config.max_ahead_s, config.max_skew_s)

    def within(self, ts: float, stamped: float | None, wall: float) -> bool:
        """Whether `ts` is used as it is. `stamped`: the message's broker time in seconds (None or
        not positive: the message has none). The consumer engine's hot path inlines this test."""
        if ts > wall + self.ahead_s:
            return False
        return stamped is None or stamped <= 0 or -self.behind_s <= ts - stamped <= self.ahead_s

    def judge(self, ts: float, stamped: float | None, wall: float) -> Skewed | None:
        """None when `ts` is within bounds; else what to do with the event and why."""
        if self.within(ts, stamped, wall):
            return None
        if ts > wall + self.ahead_s:
            return self._refused(ts, wall, "the detector's clock")
        skew = ts - stamped
        if skew > 0:
            return self._refused(ts, stamped, "its message's broker timestamp")
        if stamped > wall + self.ahead_s:
            return Skewed("behind", None, f"clock_skew: ts {ts:.3f} is {-skew:.1f} s behind its message's "
                          f"timestamp {stamped:.3f}, which is itself {stamped - wall:.1f} s ahead of the "
                          f"detector's clock {wall:.3f} (max_ahead_s {self.ahead_s:g}): not used")
        return Skewed("behind", stamped, f"clock_skew: ts {ts:.3f} is {-skew:.1f} s behind its message's "
                      f"broker timestamp {stamped:.3f} (max_skew_s {self.behind_s:g}): used at the timestamp")

    def _refused(self, ts: float, than: float, what: str) -> Skewed:
        return Skewed("ahead", None, f"clock_skew: ts {ts:.3f} is {ts - than:.1f} s ahead of {what} "
                      f"{than:.3f} (max_ahead_s {self.ahead_s:g}): not used")
