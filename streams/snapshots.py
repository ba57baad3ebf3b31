"""The detector's state in a changelog-backed Faust table (the Faust engine): when to save it,
how it is encoded, and what happens when it no longer fits in one Kafka message
(docs/streams.md, "State"). `Cadence` is shared with the consumer engine's checkpoints."""

from __future__ import annotations

import json
import logging
import time
import zlib
from dataclasses import dataclass

from streams.core import Detector, DetectorState
from streams.live import LiveDetector

log = logging.getLogger(__name__)

STATE_KEY = "detector"
# A snapshot is one changelog message: it must stay under Kafka's default 1 MB message size.
MAX_SNAPSHOT_BYTES = 900_000
SNAPSHOT_SHARE = 0.1  # at most this share of the time goes to snapshots of a large state


def encode_state(state: DetectorState) -> bytes:
    return zlib.compress(state.to_json(), 1)


def decode_state(data: bytes) -> DetectorState:
    return DetectorState.from_dict(json.loads(zlib.decompress(data)))


@dataclass
class Cadence:
    """When to save: event time moved and the last save is `every_s` old. `every_s` grows with
    the cost of a save, so that saving a large state takes at most SNAPSHOT_SHARE of the time."""

    base_every_s: float = 1.0
    every_s: float = 0.0
    _clock: float | None = None
    _at: float = float("-inf")

    def __post_init__(self) -> None:
        self.every_s = self.base_every_s

    def due(self, clock: float, now: float) -> bool:
        return clock != self._clock and now - self._at >= self.every_s

    def saved(self, clock: float, now: float, cost_s: float) -> None:
        self._clock, self._at = clock, now
        self.every_s = max(self.base_every_s, cost_s / SNAPSHOT_SHARE)

    def postponed(self, now: float) -> None:
        """Not saved this time (e.g. the broker is away): try again later, twice as long each time
        (up to a minute), so that waiting for the broker does not stall the caller's loop."""
        self._at = now
        self.every_s = min(60.0, self.every_s * 2)


@dataclass
class Snapshots:
    """Saves the live detector's state to `table` (a Faust table) and restores it once."""

    table: object
    base_every_s: float = 1.0
    restored: bool = False
    declared: bool = False
    too_big: bool = False

    def __post_init__(self) -> None:
        self.cadence = Cadence(self.base_every_s)

    def restore_once(self, live: LiveDetector) -> None:
        """Before the first event or tick: carry on from the last saved state, if there is one."""
        if self.restored:
            return
        self.restored = True
        data = self.table.get(STATE_KEY)
        if data:
            live.detector = Detector(live.detector.config, decode_state(data))
            log.info("detector state restored (event time %.3f)", live.detector.state.clock)

    async def maybe_save(self, live: LiveDetector, now: float) -> None:
        """Save when the cadence says so (`now` is monotonic)."""
        clock = live.detector.state.clock
        if not self.cadence.due(clock, now):
            return
        if not self.declared:  # the producer must know the changelog's partitions first
            await self.table.changelog_topic.declare()
            self.declared = True
        began = time.monotonic()
        snapshot = encode_state(live.detector.state)
        too_big = len(snapshot) > MAX_SNAPSHOT_BYTES
        if too_big and not self.too_big:
            log.error("detector state is %d bytes compressed, over the %d a snapshot may take: "
                      "not saved, a restart starts afresh (see docs/streams.md)",
                      len(snapshot), MAX_SNAPSHOT_BYTES)
        if not too_big:
            self.table[STATE_KEY] = snapshot
        elif STATE_KEY in self.table:
            del self.table[STATE_KEY]  # restoring a stale snapshot would be worse than none
        self.too_big = too_big
        self.cadence.saved(clock, now, time.monotonic() - began)
