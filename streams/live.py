"""The detection core fed from Kafka: events put back into event-time order, time moved on.

Kafka orders events within a partition only; the telemetry of one moment arrives spread over
three topics and many partitions. `LiveDetector` holds events in a buffer and releases them
in `ts` order (arrival order among equal ones) up to a watermark: the slowest active partition's
newest event time, minus an allowed lateness. The buffer is a table of buckets of 10 ms of event
time, each in arrival order: holding an event is an append, and a release sorts only what it
takes (a heap of every held event was a fifth of the detector's time: docs/streams.md, "A leaner
hot path"). A partition whose event time has not moved on for `idle_s` (wall time; a trickle of
old timestamps does not count) stops holding the watermark back; when every partition is idle,
event time moves on with wall time, which is how a silent node is noticed when nothing else
arrives.

A backlog (a restart, a broker outage) arrives a partition at a time, so everything read waits for
the partition read last. With `order_at` events held, an event that arrives more than `AHEAD_S`
ahead of the slowest partition is not fed: it waits with its partition's others, in arrival order,
until the slowest partitions catch up. So what is held stays small, and the oldest are never
released early and out of order: a node whose telemetry was not read yet would look silent (a false
node_lost). An engine that can stop reading the partitions whose events wait does so past
`pause_at` (streams/engines/backpressure.py). `max_buffered` held events still force the oldest out, as a
last resort.

Blind is not dead: event time moves on with the wall clock only while the detector is known to
have read everything there is. An engine that can tell (`watch_reads`) reports each moment up to
which it had read all the broker held (`caught_up`); wall time past the last such moment never
becomes event time, so a broker that is down or frozen, fetches that fail or a restart catching
up stop event time instead of making every node look silent. A pause of the detector itself
longer than `stall_s` between two calls counts the same. Time without reads does not make a
partition idle either. Wall time is passed in.
"""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass, field
from operator import itemgetter

from pydantic import BaseModel, Field

from trainmedic.bus.message import RawMessage
from trainmedic.schemas import Incident
from trainmedic.streams.core import Detector

log = logging.getLogger(__name__)

BUCKETS_PER_S = 100  # a bucket holds 10 ms of event time: a release splits at most one
AHEAD_S = 0.5  # past `order_at`, event time an arrival may be ahead of the slowest partition and be fed
# ... and how many waiting events past it are looked at for more within that: one node's clock far
# ahead must not keep its partition's others waiting behind it (they are fed with it, in order).
LOOKAHEAD = 256
_TS = itemgetter(0)


class LiveConfig(BaseModel):
    """How long to wait for stragglers, and when a partition counts as idle."""

    model_config = {"frozen": True, "extra": "forbid"}

    lateness_s: float = Field(default=0.5, ge=0, description="event time allowed between topics")
    idle_s: float = Field(default=2.0, gt=0, description="wall time after which a silent partition "
                          "no longer holds the watermark back")
    max_buffered: int = Field(default=500_000, ge=1, description="events held before the oldest "
                              "are released regardless, out of order: a last resort, kept well above "
                              "order_at")
    order_at: int = Field(default=100_000, ge=1, description="events held from which an event that "
                          "arrives over 0.5 s (event time) ahead of the slowest partition waits, "
                          "unfed, until that partition catches up; set it above what the cluster "
                          "holds in steady state (its events/s x about 0.6 s)")
    pause_at: int = Field(default=250_000, ge=1, description="events held and waiting from which the "
                          "consumer engine stops reading each partition with more than its share of "
                          "them waiting, until they are fed: at most about 2 x pause_at + order_at are held "
                          "and waiting")
    release_every_s: float = Field(default=0.01, ge=0, description="wall time between watermark "
                                   "updates on arrival (ticks always update): the watermark spans "
                                   "every partition, too costly to recompute per event")
    max_skew_s: float = Field(default=300.0, gt=0, description="an event whose ts is further than "
                              "this behind the time the broker stamped its message is dead-lettered "
                              "and used at the stamped time, never at its own")
    max_ahead_s: float = Field(default=5.0, gt=0, description="an event whose ts is further than this "
                               "ahead of the broker's stamp on its message, or of the detector's own "
                               "clock, is dead-lettered (clock_skew) and not used: no producer's clock "
                               "moves event time on")
    blind_s: float = Field(default=3.0, gt=0, description="reads unconfirmed for longer than this "
                           "(broker down or frozen) are a blind spell: afterwards event time waits "
                           "rejoin_s for the producers")
    rejoin_s: float = Field(default=10.0, ge=0, description="after a blind spell: how long event time "
                            "stays where it was while the producers reconnect (librdkafka backs off up "
                            "to 10 s) and send what they held; nodes share partitions, so one node's "
                            "late backlog lands behind another's fresh data")
    stall_s: float = Field(default=1.0, gt=0, description="wall time between two calls (events or "
                           "ticks) beyond which the detector itself was paused: that time is not "
                           "read time, event time does not move on with it")


@dataclass
class _Source:
    max_ts: float  # the newest event time fed
    last_wall: float
    arrived: float = float("-inf")  # the newest event time arrived, fed or waiting
    read_at: float = float("-inf")  # it alone was read to its end then (`read_through`)


@dataclass(frozen=True, slots=True)
class Held:
    """An event held for ordering, with the message it came from (`origin`, as the caller passed
    it to `feed`; None for an event fed without one) and its place among events of the same `ts`
    (`seq`)."""

    event: BaseModel  # or its fast twin (schemas/wire.py)
    origin: RawMessage | None
    seq: int


@dataclass(frozen=True, slots=True)
class Failure:
    """An event the core raised on: it is not applied; the caller dead-letters it (`origin` as
    in `Held`)."""

    event: BaseModel  # or its fast twin (schemas/wire.py)
    origin: RawMessage | None
    error: str


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
    # Held events as (ts, event, origin) in arrival order, per bucket of event time (int(ts *
    # BUCKETS_PER_S)); the buckets' keys in a heap of their own.
    _buckets: dict[int, list] = field(default_factory=dict)
    _keys: list[int] = field(default_factory=list)
    _count: int = 0
    _sources: dict[tuple, _Source] = field(default_factory=dict)
    # Past `order_at`: per source, the events that arrived ahead of the slowest, unfed, in arrival order.
    _ahead: dict[tuple, list] = field(default_factory=dict)
    _waiting: int = 0
    _watermark: float = float("-inf")
    _released_at: float = float("-inf")  # wall time of the last watermark update
    _called_at: float = float("-inf")  # wall time of the last feed or tick
    _caught_up_at: float = float("inf")  # everything the broker held then was read (inf: not watched)
    _confirmed_at: float = float("-inf")  # wall time the last `caught_up` came (a lag after the above)
    _held_until: float = float("-inf")  # in or after a blind spell: wall time until which event time
    _held_at: float = float("-inf")  # ... stays at this watermark (inf: until the spell is over)
    _advance_failed_at: float = float("-inf")  # wall time the last failure to advance was logged

    def feed(self, event: BaseModel, source: tuple, wall: float,
             origin: RawMessage | None = None) -> list[Incident]:
        """Take one event that arrived from `source` (a topic partition) at `wall`, in `origin`."""
        return self.feed_many([(source, [(event.ts, event, origin)])], wall)

    def feed_many(self, runs: list[tuple[tuple, list[tuple]]], wall: float) -> list[Incident]:
        """Take what arrived together at `wall` (a fetch): per source, its events as (ts, event,
        origin) in arrival order. Every run is held and every source brought up to date before the
        watermark is, at most once: a source later in the fetch is not made late by an earlier
        one's newer events. Holds the entries themselves, not copies."""
        if wall - self._called_at > self.config.stall_s:
            self._stalled(wall)
        self._called_at = wall
        config = self.config
        if self._ahead or self._count >= config.order_at:
            self._wait(runs, wall)  # fed, as far as due, by the next release
        else:
            for source, entries in runs:
                self._fed(source, self._hold(entries), wall)
        if wall - self._released_at < config.release_every_s and self._count <= config.max_buffered:
            return []  # a later arrival or the next tick releases it, in the same order
        return self._release(wall)

    def _fed(self, source: tuple, top: float, wall: float) -> None:
        """`source`'s events up to `top` were fed at `wall`."""
        seen = self._sources.get(source)
        if seen is None:
            self._sources[source] = _Source(top, wall, top)
        elif top > seen.max_ts:  # only progress in event time keeps a partition active
            seen.max_ts = top
            seen.last_wall = wall
            if top > seen.arrived:
                seen.arrived = top

    def _wait(self, runs: list[tuple[tuple, list[tuple]]], wall: float) -> None:
        """Many held: each run waits behind its source's waiting events (`_feed_waiting` feeds them)."""
        ahead, sources = self._ahead, self._sources
        for source, entries in runs:
            ahead.setdefault(source, []).extend(entries)
            self._waiting += len(entries)
            top = max(entries, key=_TS)[0]
            seen = sources.get(source)
            if seen is None:
                sources[source] = _Source(float("-inf"), wall, top)
            elif top > seen.arrived:
                seen.arrived = top

    def _feed_waiting(self, wall: float) -> None:
        """Feed each source's waiting events, in arrival order, up to the last within AHEAD_S past the
        slowest source's newest arrival (looking LOOKAHEAD past any later): a prefix, so that a
        checkpoint can leave the rest to Kafka. Once fewer than half of `order_at` are held and
        waiting, all are fed: none can come late, they are ahead. None while event time stands still
        after a blind spell (`rejoin_s`, as the producers deliver what they held), unless
        `max_buffered` wait: fed, they would be held, and past `max_buffered` the oldest released
        early, out of order; waiting, they can be left to Kafka (`pause_at`). (In the spell itself
        they are fed: an engine that stopped reading a partition whose events wait may need them
        fed to read on, and be confirmed, and end the spell.)"""
        ahead, config = self._ahead, self.config
        if self._count + self._waiting < config.order_at // 2:
            cutoff = float("inf")
        elif wall < self._held_until != float("inf") and self._waiting < config.max_buffered:
            return
        else:
            cutoff = min(self._sources[source].arrived for source in self.holding(wall)) + AHEAD_S
        for source, waiting in list(ahead.items()):
            n = 0  # up to the last within the cutoff, looking LOOKAHEAD past the last found
            for scanned, entry in enumerate(waiting, 1):
                if entry[0] <= cutoff:
                    n = scanned
                elif scanned - n > LOOKAHEAD:
                    break
            if not n:
                continue
            self._fed(source, self._hold(waiting[:n]), wall)
            if n == len(waiting):
                del ahead[source]
            else:
                del waiting[:n]
            self._waiting -= n

    def _hold(self, entries: list[tuple]) -> float:
        """Put (ts, event, origin) entries in their buckets, in order; the newest ts among them."""
        buckets, keys = self._buckets, self._keys
        key = bucket = None
        top = float("-inf")
        for entry in entries:  # ts is within the contract's bounds (the decider checks its input's)
            ts = entry[0]
            if ts > top:
                top = ts
            at = int(ts * BUCKETS_PER_S)
            if at != key:  # a partition's events mostly share one bucket
                key = at
                bucket = buckets.get(key)
                if bucket is None:
                    bucket = buckets[key] = []
                    heapq.heappush(keys, key)
            bucket.append(entry)
        self._count += len(entries)
        return top

    def tick(self, wall: float) -> list[Incident]:
        """Let time pass with no event: releases what is due and fires deadlines."""
        if wall - self._called_at > self.config.stall_s:
            self._stalled(wall)
        self._called_at = wall
        return self._release(wall)

    def watch_reads(self) -> None:
        """From now on, event time moves on with the wall clock only up to the last `caught_up`."""
        if self._caught_up_at == float("inf"):
            self._caught_up_at = float("-inf")

    def caught_up(self, wall: float) -> None:
        """The engine had read, by now, every message the broker held at wall time `wall` (e.g. the
        partitions' end offsets asked for at `wall`). The time since the previous such moment, if
        longer than `blind_s`, was a blind spell: partitions did not go idle in it, and event time
        stays where it is for `rejoin_s` from now while the producers deliver what they held. A
        spell begins when no such news has come for `blind_s`, not when the moment it tells of is
        that old: a detector reading further behind than that is behind, not blind."""
        last = self._caught_up_at
        if last == float("inf"):
            return
        now, before = max(wall, self._called_at), self._confirmed_at
        self._confirmed_at = max(before, now)  # news even if of a moment before the last: reads go on
        if wall <= last:
            return
        # A spell ends at the first confirmation after it began (`_release` noticed it), however soon
        # after the one before; one that comes more than blind_s after the one before ends one that
        # no release noticed.
        if last != float("-inf") and (now - before > self.config.blind_s or self._held_until == float("inf")):
            rejoin = self.config.rejoin_s  # from now: a detector reading behind reads the backlog later
            self._shift_quiet(last, now + max(0.0, rejoin - self.config.idle_s))
            if self._held_until != float("inf"):  # no release noticed the spell
                self._held_at = self._watermark
            self._held_until = now + rejoin
            log.warning("reads complete again after %.1f s: event time waits %.0f s for the producers' "
                        "backlog", wall - last, rejoin)
        self._caught_up_at = wall

    def read_through(self, wall: float, sources: frozenset) -> None:
        """As `caught_up`, for `sources` alone (the engine asked about no others: it is not reading
        them, streams/engines/backpressure.py): each can be found quiet, but that says nothing of a blind
        spell."""
        for source in sources:
            seen = self._sources.get(source)
            if seen is not None and wall > seen.read_at:
                seen.read_at = wall

    @property
    def blind_for(self) -> float | None:
        """Wall seconds since reads were last known complete, as of the last call (None when
        not watched)."""
        if self._caught_up_at == float("inf"):
            return None
        if self._caught_up_at == float("-inf"):
            return 0.0 if self._called_at == float("-inf") else float("inf")
        return max(0.0, self._called_at - self._caught_up_at)

    def _stalled(self, wall: float) -> None:
        """The detector was not running between the last call and `wall`: that time was neither
        read nor quiet."""
        if self._called_at != float("-inf"):
            self._shift_quiet(self._called_at, wall)
            if self._caught_up_at != float("inf"):
                self._caught_up_at = min(self._caught_up_at, self._called_at)
                self._confirmed_at = min(self._confirmed_at, self._called_at)
                for seen in self._sources.values():
                    seen.read_at = min(seen.read_at, self._called_at)

    def _shift_quiet(self, start: float, end: float) -> None:
        """Wall time between `start` and `end` was blind: it does not count as a source's quiet."""
        for seen in self._sources.values():
            seen.last_wall += max(0.0, end - max(seen.last_wall, start))

    def expect(self, sources: list[tuple], wall: float) -> None:
        """Sources known to have events on their way (e.g. a backlog at start): each holds the
        watermark back until it delivers or has been quiet for `idle_s`. Without this, the first
        partition a backlog arrives from would race ahead of the others, unseen as yet."""
        for source in sources:
            self._sources.setdefault(source, _Source(float("-inf"), wall))

    def holding(self, wall: float) -> dict[tuple, float]:
        """The sources holding event time back at `wall` (not quiet for `idle_s`, or with events
        waiting), with how far they have delivered: the newest event time fed, or for a source with
        events waiting, the time of the first of them. (One that arrived behind it, more than
        lateness_s earlier, may come late: as it may when its partition is the slowest.)"""
        # Quiet counts only as far as reads are known complete: unread data is not silence.
        caught_up, idle_s, ahead = self._caught_up_at, self.config.idle_s, self._ahead
        return {source: ahead[source][0][0] if source in ahead else seen.max_ts
                for source, seen in self._sources.items()
                if min(wall, max(caught_up, seen.read_at)) - seen.last_wall < idle_s or source in ahead}

    def waiting(self) -> dict[tuple, int]:
        """Per source, its events waiting unfed (`order_at`)."""
        return {source: len(entries) for source, entries in self._ahead.items()}

    def take_failures(self) -> list[Failure]:
        failed, self.failed = self.failed, []
        return failed

    @property
    def buffered(self) -> int:
        """Events held and waiting."""
        return self._count + self._waiting

    @property
    def watermark(self) -> float:
        return self._watermark

    def held(self) -> list[Held]:
        """The events held for ordering (in no particular order: `seq` orders those of equal `ts`)."""
        return [Held(event, origin, seq) for seq, (_, event, origin) in enumerate(self.held_entries())]

    def held_entries(self, waiting: bool = True) -> list[tuple[float, object, RawMessage | None]]:
        """The held events as (ts, event, origin), those of equal `ts` in arrival order, then those
        waiting unless not `waiting` (no Held made: a checkpoint takes tens of thousands)."""
        buckets = self._buckets
        held = [entry for key in sorted(buckets) for entry in buckets[key]]
        return held + [entry for entries in self._ahead.values() for entry in entries] if waiting else held

    def waiting_entries(self) -> dict[tuple, list[tuple]]:
        """Per source, its events waiting unfed as (ts, event, origin), in arrival order (not copies)."""
        return self._ahead

    def sources(self, wall: float) -> dict[tuple, tuple[float, float]]:
        """Per source: the newest event time seen, and the wall time it has been quiet at `wall`."""
        return {source: (seen.max_ts, max(0.0, wall - seen.last_wall))
                for source, seen in self._sources.items()}

    def resume(self, watermark: float, held: list[Held], sources: dict[tuple, tuple[float, float]],
               wall: float) -> None:
        """Carry on from a checkpoint: the watermark it had reached, the events it held, and its
        sources as `sources()` gave them. The time the detector was down does not count as quiet:
        a source that had just delivered still holds the watermark back until it delivers again
        (or `idle_s` passes), so a backlog read a partition at a time after a restart is released
        in the order it would have been."""
        self._watermark = watermark
        self._hold([(item.event.ts, item.event, item.origin)
                    for item in sorted(held, key=lambda item: (item.event.ts, item.seq))])
        for source, (max_ts, quiet_s) in sources.items():
            self._sources[source] = _Source(max_ts, wall - quiet_s, max_ts)

    def _release(self, wall: float) -> list[Incident]:
        self._released_at = wall
        if self._ahead:
            self._feed_waiting(wall)
        mark = self._compute_watermark(wall)
        if mark is None:
            return []
        if (wall - self._confirmed_at > self.config.blind_s and abs(self._caught_up_at) != float("inf")
                and self._held_until < wall):  # a blind spell: event time stays until it is over
            self._held_until, self._held_at = float("inf"), self._watermark
        if wall < self._held_until:  # blind, or rejoining after a blind spell
            mark = min(mark, self._held_at)
        self._watermark = max(self._watermark, mark)
        due = self._take_due(self._watermark)

        def failed(n: int, err: Exception) -> None:  # a core bug: the others go on; the caller keeps it
            _, event, origin = due[n]
            log.error("detector failed on %s from %s", type(event).__name__, origin, exc_info=err)
            self.failed.append(Failure(event, origin, f"{type(err).__name__}: {err}"))

        incidents: list[Incident] = []  # a list of its own: the core's may be the one it fills next
        if due:
            incidents += self.detector.observe_each([entry[1] for entry in due], failed)
        if self._watermark > self.detector.state.clock:
            try:
                incidents += self.detector.advance(self._watermark)
            except Exception:  # a core bug: the next tick tries again; logged once a minute
                if wall - self._advance_failed_at >= 60.0:
                    self._advance_failed_at = wall
                    log.exception("detector failed to advance to %.3f", self._watermark)
        return incidents

    def _take_due(self, mark: float) -> list[tuple]:
        """The held events with `ts` <= `mark`, then the oldest others while more than `max_buffered`
        are held, in `ts` order (arrival order among equal ones): taken out of the buffer."""
        keys, buckets = self._keys, self._buckets
        due: list[tuple] = []
        last = int(mark * BUCKETS_PER_S) if mark != float("-inf") else None
        while keys and last is not None and keys[0] <= last:
            key = keys[0]
            bucket = buckets[key]
            if key == last:  # the bucket `mark` falls in: only a part of it may be due
                now = [entry for entry in bucket if entry[0] <= mark]
                if len(now) < len(bucket):
                    if now:
                        buckets[key] = [entry for entry in bucket if entry[0] > mark]
                        due += now
                    break
            heapq.heappop(keys)
            del buckets[key]
            due += bucket
        due.sort(key=_TS)  # stable: each bucket is in arrival order, and equal ts share a bucket
        self._count -= len(due)
        over = self._count - self.config.max_buffered
        while over > 0:  # the buffer is full: the oldest go early, in order
            bucket = buckets[keys[0]]
            bucket.sort(key=_TS)
            early = bucket[:over]
            del bucket[:over]
            if not bucket:
                del buckets[heapq.heappop(keys)]
            due += early
            self.forced += len(early)
            self._count -= len(early)
            over -= len(early)
        return due

    def _compute_watermark(self, wall: float) -> float | None:
        if not self._sources:
            return None
        active = self.holding(wall)
        if active:
            return min(active.values()) - self.config.lateness_s
        # Everything is quiet: event time goes on from the newest event, at wall-clock pace, as
        # far as reads are known complete (not at all while the detector is blind).
        read_until = min(wall, self._caught_up_at)
        newest = max(self._sources.values(), key=lambda s: s.max_ts)
        last_wall = max(s.last_wall for s in self._sources.values())
        if read_until <= last_wall:
            return None
        return newest.max_ts + (read_until - last_wall) - self.config.lateness_s
