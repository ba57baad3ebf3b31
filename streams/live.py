"""The detection core fed from Kafka: `LiveDetector` composes the event-time reorder buffer
(streams/ordering.py) and the record of reads known complete (streams/read_tracking.py), tuned by
`LiveConfig` (streams/live_config.py). See docs/streams.md, "Event time from Kafka: watermark and
lateness" and "Blind is not dead"."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pydantic import BaseModel

from trainmedic.bus.message import RawMessage
from trainmedic.schemas import Incident
from trainmedic.streams.core import Detector
from trainmedic.streams.live_config import LiveConfig
from trainmedic.streams.metrics import CORE_LIMITS
from trainmedic.streams.ordering import Held, Ordering
from trainmedic.streams.read_tracking import ReadTracker

log = logging.getLogger(__name__)

__all__ = ["Failure", "Held", "LiveConfig", "LiveDetector"]


@dataclass(frozen=True, slots=True)
class Failure:
    """An event the core raised on, or (`refused`) refused as unplaced (streams/core/placement.py, `error`
    the reason): it is not applied; the caller dead-letters it (`origin` as in `Held`)."""

    event: BaseModel  # or its fast twin (schemas/wire.py)
    origin: RawMessage | None
    error: str
    refused: bool = False


@dataclass
class LiveDetector:
    """Feeds `detector` in event-time order; `feed_many` per fetch (`feed` per event), `tick` on a
    timer.

    Sources are `(topic, partition)` tuples. An event the core raises on is logged, skipped and
    kept in `failed` for the caller to take with `take_failures()`; the others go on."""

    detector: Detector
    config: LiveConfig = field(default_factory=LiveConfig)
    forced: int = 0  # events released early because the buffer was full
    failed: list[Failure] = field(default_factory=list)
    _order: Ordering = field(init=False, repr=False)  # held and waiting events, the sources
    _reads: ReadTracker = field(init=False, repr=False)  # reads known complete, over the same sources
    _watermark: float = float("-inf")
    _released_at: float = float("-inf")  # wall time of the last watermark update
    _advance_failed_at: float = float("-inf")  # wall time the last failure to advance was logged

    def __post_init__(self) -> None:
        # the core asked at the time: a checkpoint's restore puts in another (checkpoints/contents.py)
        self._order = Ordering(self.config, awaited=lambda report: self.detector.first_failure(report))
        self._reads = ReadTracker(self.config, self._order.sources)
        CORE_LIMITS.watch(self)  # the metrics read what the core's limits held back (streams/metrics.py)

    def feed(self, event: BaseModel, source: tuple, wall: float,
             origin: RawMessage | None = None) -> list[Incident]:
        """Take one event that arrived from `source` (a topic partition) at `wall`, in `origin`."""
        return self.feed_many([(source, [(event.ts, event, origin)])], wall)

    def feed_many(self, runs: list[tuple[tuple, list[tuple]]], wall: float) -> list[Incident]:
        """Take what arrived together at `wall` (a fetch): per source, its events as (ts, event,
        origin) in arrival order. Every run is held and every source brought up to date before the
        watermark is, at most once: a source later in the fetch is not made late by an earlier
        one's newer events. Holds the entries themselves, not copies."""
        config, reads, order = self.config, self._reads, self._order
        if wall - reads.called_at > config.stall_s:
            reads.stalled(wall)
        reads.called_at = wall
        order.take(runs, wall)
        if wall - self._released_at < config.release_every_s and order.count <= config.max_buffered:
            return []  # a later arrival or the next tick releases it, in the same order
        return self._release(wall)

    def tick(self, wall: float) -> list[Incident]:
        """Let time pass with no event: releases what is due and fires deadlines."""
        reads = self._reads
        if wall - reads.called_at > self.config.stall_s:
            reads.stalled(wall)
        reads.called_at = wall
        return self._release(wall)

    def watch_reads(self) -> None:
        """From now on, event time moves on with the wall clock only up to the last `caught_up`."""
        self._reads.watch()

    def caught_up(self, wall: float) -> None:
        """The engine had read, by now, every message the broker held at wall time `wall` (e.g. the
        partitions' end offsets asked for at `wall`). The time since the previous such moment, if
        longer than `blind_s`, was a blind spell: partitions did not go idle in it, and event time
        stays where it is for `rejoin_s` from now while the producers deliver what they held. A
        spell begins when no such news has come for `blind_s`, not when the moment it tells of is
        that old: a detector reading further behind than that is behind, not blind."""
        self._reads.caught_up(wall, self._watermark)

    def read_through(self, wall: float, sources: frozenset) -> None:
        """As `caught_up`, for `sources` alone (the engine asked about no others: it is not reading
        them, streams/engines/backpressure.py): each can be found quiet, but that says nothing of a blind
        spell."""
        self._reads.read_through(wall, sources)

    @property
    def blind_for(self) -> float | None:
        """Wall seconds since reads were last known complete, as of the last call (None when
        not watched)."""
        return self._reads.blind_for

    def expect(self, sources: list[tuple], wall: float) -> None:
        """Sources known to have events on their way (e.g. a backlog at start): each holds the
        watermark back until it delivers or has been quiet for `idle_s`. Without this, the first
        partition a backlog arrives from would race ahead of the others, unseen as yet."""
        self._order.expect(sources, wall)

    def holding(self, wall: float) -> dict[tuple, float]:
        """The sources holding event time back at `wall` (not quiet for `idle_s`, or with events
        waiting), with how far they have delivered: the newest event time fed, or for a source with
        events waiting, the time of the first of them. (One that arrived behind it, more than
        lateness_s earlier, may come late: as it may when its partition is the slowest.)"""
        # Quiet counts only as far as reads are known complete: unread data is not silence.
        return self._order.holding(wall, self._reads.caught_up_at)

    def waiting(self) -> dict[tuple, int]:
        """Per source, its events waiting unfed (`order_at`)."""
        return {source: len(entries) for source, entries in self._order.ahead.items()}

    def take_failures(self) -> list[Failure]:
        failed, self.failed = self.failed, []
        return failed

    @property
    def buffered(self) -> int:
        """Events held and waiting."""
        return self._order.count + self._order.waiting

    @property
    def watermark(self) -> float:
        return self._watermark

    def held(self) -> list[Held]:
        """The events held for ordering (in no particular order: `seq` orders those of equal `ts`)."""
        return [Held(event, origin, seq) for seq, (_, event, origin) in enumerate(self.held_entries())]

    def held_entries(self, waiting: bool = True) -> list[tuple[float, object, RawMessage | None]]:
        """The held events as (ts, event, origin), those of equal `ts` in arrival order, then those
        waiting unless not `waiting` (no Held made: a checkpoint takes tens of thousands)."""
        return self._order.held_entries(waiting)

    def waiting_entries(self) -> dict[tuple, list[tuple]]:
        """Per source, its events waiting unfed as (ts, event, origin), in arrival order (not copies)."""
        return self._order.ahead

    def sources(self, wall: float) -> dict[tuple, tuple[float, float]]:
        """Per source: the newest event time seen, and the wall time it has been quiet at `wall`."""
        return {source: (seen.max_ts, max(0.0, wall - seen.last_wall))
                for source, seen in self._order.sources.items()}

    def resume(self, watermark: float, held: list[Held], sources: dict[tuple, tuple[float, float]],
               wall: float) -> None:
        """Carry on from a checkpoint: the watermark it had reached, the events it held, and its
        sources as `sources()` gave them. The time the detector was down does not count as quiet:
        a source that had just delivered still holds the watermark back until it delivers again
        (or `idle_s` passes), so a backlog read a partition at a time after a restart is released
        in the order it would have been."""
        self._watermark = watermark
        self._order.resume(held, sources, wall)

    def _release(self, wall: float) -> list[Incident]:
        self._released_at = wall
        order, reads = self._order, self._reads
        if order.ahead:
            order.feed_waiting(wall, reads.caught_up_at, reads.held_until)
        mark = order.watermark(wall, reads.caught_up_at)
        if mark is None:
            return []
        mark = reads.hold(mark, wall, self._watermark)
        self._watermark = max(self._watermark, mark)
        due, early = order.take_due(self._watermark)
        if early:
            self.forced += early

        def failed(n: int, err: Exception) -> None:  # a core bug: the others go on; the caller keeps it
            _, event, origin = due[n]
            log.error("detector failed on %s from %s", type(event).__name__, origin, exc_info=err)
            self.failed.append(Failure(event, origin, f"{type(err).__name__}: {err}"))

        incidents: list[Incident] = []  # a list of its own: the core's may be the one it fills next
        if due:
            incidents += self.detector.observe_each([entry[1] for entry in due], failed)
            refused = self.detector.take_refused()
            if refused:
                origins = {id(event): origin for _, event, origin in due}
                self.failed += [Failure(event, origins.get(id(event)), reason, refused=True)
                                for event, reason in refused]
        if self._watermark > self.detector.state.clock:
            try:
                incidents += self.detector.advance(self._watermark)
            except Exception:  # a core bug: the next tick tries again; logged once a minute
                if wall - self._advance_failed_at >= 60.0:
                    self._advance_failed_at = wall
                    log.exception("detector failed to advance to %.3f", self._watermark)
        return incidents
