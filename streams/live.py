"""The detection core fed from Kafka: events put back into event-time order, time moved on.

Kafka orders events within a partition only; the telemetry of one moment arrives spread over
three topics and many partitions. `LiveDetector` holds events in a buffer and releases them
in `ts` order up to a watermark: the slowest active partition's newest event time, minus an
allowed lateness. A partition that delivered nothing for `idle_s` (wall time) stops holding
the watermark back; when every partition is idle, event time moves on with wall time, which
is how a silent node is noticed when nothing else arrives. Wall time is passed in.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from schemas import Incident
from streams.core import Detector

log = logging.getLogger(__name__)


class LiveConfig(BaseModel):
    """How long to wait for stragglers, and when a partition counts as idle."""

    model_config = {"frozen": True, "extra": "forbid"}

    lateness_s: float = Field(default=0.5, ge=0, description="event time allowed between topics")
    idle_s: float = Field(default=2.0, gt=0, description="wall time after which a silent partition "
                          "no longer holds the watermark back")
    max_buffered: int = Field(default=500_000, ge=1, description="events held before the oldest "
                              "are released regardless")
    release_every_s: float = Field(default=0.01, ge=0, description="wall time between watermark "
                                   "updates on arrival (ticks always update): the watermark spans "
                                   "every partition, too costly to recompute per event")


@dataclass
class _Source:
    max_ts: float
    last_wall: float


@dataclass
class LiveDetector:
    """Feeds `detector` in event-time order; `feed` per event, `tick` on a timer."""

    detector: Detector
    config: LiveConfig = field(default_factory=LiveConfig)
    forced: int = 0  # events released early because the buffer was full
    _heap: list = field(default_factory=list)
    _seq: itertools.count = field(default_factory=itertools.count)
    _sources: dict[object, _Source] = field(default_factory=dict)
    _watermark: float = float("-inf")
    _released_at: float = float("-inf")  # wall time of the last watermark update

    def feed(self, event: BaseModel, source: object, wall: float) -> list[Incident]:
        """Take one event that arrived from `source` (e.g. a topic partition) at `wall`."""
        heapq.heappush(self._heap, (event.ts, next(self._seq), event))
        seen = self._sources.get(source)
        if seen is None:
            self._sources[source] = _Source(event.ts, wall)
        else:
            seen.max_ts = max(seen.max_ts, event.ts)
            seen.last_wall = wall
        config = self.config
        if wall - self._released_at < config.release_every_s and len(self._heap) <= config.max_buffered:
            return []  # a later arrival or the next tick releases it, in the same order
        return self._release(wall)

    def tick(self, wall: float) -> list[Incident]:
        """Let time pass with no event: releases what is due and fires deadlines."""
        return self._release(wall)

    @property
    def buffered(self) -> int:
        return len(self._heap)

    def held(self) -> list[BaseModel]:
        """The events held for ordering, in the order they will be released."""
        return [event for _, _, event in sorted(self._heap, key=lambda entry: entry[:2])]

    def resume(self, watermark: float, held: list[BaseModel]) -> None:
        """Carry on from a checkpoint: the watermark it had reached and the events it held.
        Partitions are learned again from arrivals: their wall times mean nothing after a restart."""
        self._watermark = watermark
        for event in held:
            heapq.heappush(self._heap, (event.ts, next(self._seq), event))

    @property
    def watermark(self) -> float:
        return self._watermark

    def _release(self, wall: float) -> list[Incident]:
        self._released_at = wall
        mark = self._compute_watermark(wall)
        if mark is None:
            return []
        self._watermark = max(self._watermark, mark)
        incidents: list[Incident] = []
        heap, observe = self._heap, self.detector.observe
        while heap and heap[0][0] <= self._watermark:
            incidents += observe(heapq.heappop(heap)[2])
        while len(heap) > self.config.max_buffered:
            self.forced += 1
            incidents += observe(heapq.heappop(heap)[2])
        if self._watermark > self.detector.state.clock:
            incidents += self.detector.advance(self._watermark)
        return incidents

    def _compute_watermark(self, wall: float) -> float | None:
        if not self._sources:
            return None
        active = [s.max_ts for s in self._sources.values() if wall - s.last_wall < self.config.idle_s]
        if active:
            return min(active) - self.config.lateness_s
        # Everything is quiet: event time goes on from the newest event, at wall-clock pace.
        newest = max(self._sources.values(), key=lambda s: s.max_ts)
        last_wall = max(s.last_wall for s in self._sources.values())
        return newest.max_ts + (wall - last_wall) - self.config.lateness_s
