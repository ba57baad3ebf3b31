"""Blind is not dead: `LiveDetector`'s record of how far reads are known complete, the detector's own
pauses (`stall_s`), and the blind spells in which event time stands still.
See docs/streams.md, "Blind is not dead"."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from trainmedic.streams.live_config import LiveConfig
from trainmedic.streams.ordering import Source

log = logging.getLogger(__name__)


@dataclass
class ReadTracker:
    """How far reads are known complete, over the sources the order buffer keeps (`sources`, its
    own dict: shared, not copied)."""

    config: LiveConfig
    sources: dict[tuple, Source]
    called_at: float = float("-inf")  # wall time of the last feed or tick
    caught_up_at: float = float("inf")  # everything the broker held then was read (inf: not watched)
    confirmed_at: float = float("-inf")  # wall time the last `caught_up` came (a lag after the above)
    held_until: float = float("-inf")  # in or after a blind spell: wall time until which event time
    held_at: float = float("-inf")  # ... stays at this watermark (inf: until the spell is over)

    def watch(self) -> None:
        """From now on, event time moves on with the wall clock only up to the last `caught_up`."""
        if self.caught_up_at == float("inf"):
            self.caught_up_at = float("-inf")

    def caught_up(self, wall: float, watermark: float) -> None:
        """Reads were complete at `wall` (`LiveDetector.caught_up`); `watermark` is where event time
        stands now, where it stays for `rejoin_s` after a blind spell no release noticed."""
        last = self.caught_up_at
        if last == float("inf"):
            return
        now, before = max(wall, self.called_at), self.confirmed_at
        self.confirmed_at = max(before, now)  # news even if of a moment before the last: reads go on
        if wall <= last:
            return
        # A spell ends at the first confirmation after it began (`hold` noticed it), however soon
        # after the one before; one that comes more than blind_s after the one before ends one that
        # no release noticed.
        if last != float("-inf") and (now - before > self.config.blind_s or self.held_until == float("inf")):
            rejoin = self.config.rejoin_s  # from now: a detector reading behind reads the backlog later
            self.shift_quiet(last, now + max(0.0, rejoin - self.config.idle_s))
            if self.held_until != float("inf"):  # no release noticed the spell
                self.held_at = watermark
            self.held_until = now + rejoin
            log.warning("reads complete again after %.1f s: event time waits %.0f s for the producers' "
                        "backlog", wall - last, rejoin)
        self.caught_up_at = wall

    def read_through(self, wall: float, sources: frozenset) -> None:
        """As `caught_up`, for `sources` alone: each can be found quiet, but that says nothing of a
        blind spell."""
        for source in sources:
            seen = self.sources.get(source)
            if seen is not None and wall > seen.read_at:
                seen.read_at = wall

    @property
    def blind_for(self) -> float | None:
        """Wall seconds since reads were last known complete, as of the last call (None when
        not watched)."""
        if self.caught_up_at == float("inf"):
            return None
        if self.caught_up_at == float("-inf"):
            return 0.0 if self.called_at == float("-inf") else float("inf")
        return max(0.0, self.called_at - self.caught_up_at)

    def stalled(self, wall: float) -> None:
        """The detector was not running between the last call and `wall`: that time was neither
        read nor quiet."""
        if self.called_at != float("-inf"):
            self.shift_quiet(self.called_at, wall)
            if self.caught_up_at != float("inf"):
                self.caught_up_at = min(self.caught_up_at, self.called_at)
                self.confirmed_at = min(self.confirmed_at, self.called_at)
                for seen in self.sources.values():
                    seen.read_at = min(seen.read_at, self.called_at)

    def shift_quiet(self, start: float, end: float) -> None:
        """Wall time between `start` and `end` was blind: it does not count as a source's quiet."""
        for seen in self.sources.values():
            seen.last_wall += max(0.0, end - max(seen.last_wall, start))

    def hold(self, mark: float, wall: float, watermark: float) -> float:
        """The watermark `mark` as far as a blind spell lets it go at `wall`: no further than
        `watermark` (where event time stood) in the spell and for `rejoin_s` after it."""
        if (wall - self.confirmed_at > self.config.blind_s and abs(self.caught_up_at) != float("inf")
                and self.held_until < wall):  # a blind spell: event time stays until it is over
            self.held_until, self.held_at = float("inf"), watermark
        if wall < self.held_until:  # blind, or rejoining after a blind spell
            return min(mark, self.held_at)
        return mark
