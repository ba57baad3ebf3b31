"""`LiveDetector`'s event-time reorder buffer: events held in 10 ms buckets and released in `ts`
order up to a watermark, and past `order_at` those far ahead of the slowest partition kept waiting.
See docs/streams.md, "Event time from Kafka: watermark and lateness" and "Reading a backlog"."""

from __future__ import annotations

import heapq
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter

from pydantic import BaseModel

from trainmedic.bus.message import RawMessage
from trainmedic.schemas import telemetry, wire
from trainmedic.streams.live_config import LiveConfig

BUCKETS_PER_S = 100  # a bucket holds 10 ms of event time: a release splits at most one
AHEAD_S = 0.5  # past `order_at`, event time an arrival may be ahead of the slowest partition and be fed
# ... and how many waiting events past it are looked at for more within that: one node's clock far
# ahead must not keep its partition's others waiting behind it (they are fed with it, in order).
LOOKAHEAD = 256
_TS = itemgetter(0)
INF = float("inf")
log = logging.getLogger(__name__)
# A rank's failure reports, as the contract's models and their fast twins: while one that `Ordering.awaited`
# says is its rank's first is held, event time may come within `failure_lateness_s` of the slowest source,
# up to the newest such report (`Ordering.watermark`; docs/streams.md, "A failure report may wait less").
FAILURE_REPORTS = frozenset(kind for model in (telemetry.WorkerFailed, telemetry.WorkerExited)
                            for kind in (model, wire.STRUCTS[model], wire.TRUSTED[wire.STRUCTS[model]]))


@dataclass
class Source:
    """What is known of one source (a topic partition); shared with the read tracker."""

    max_ts: float  # the newest event time fed
    last_wall: float
    arrived: float = float("-inf")  # the newest event time arrived, fed or waiting
    read_at: float = float("-inf")  # it alone was read to its end then (`read_through`)


def through(seen: Source, at: float, wall: float, caught_up: float) -> float:
    """How far in event time a source with nothing waiting has delivered: its newest event time `at`,
    moved on at wall-clock pace since it was fed, as far as its reads are known complete (up to
    `caught_up`, or its own `read_at`; not at all where reads are not watched, `caught_up` infinite):
    what it appends later is stamped later, so a partition read to its end is not waited for until it
    goes idle (docs/streams.md, "Event time from Kafka")."""
    known = max(caught_up if caught_up != float("inf") else float("-inf"), seen.read_at)
    return at + max(0.0, min(wall, known) - seen.last_wall)


@dataclass(frozen=True, slots=True)
class Held:
    """An event held for ordering, with the message it came from (`origin`, as the caller passed
    it to `feed`; None for an event fed without one) and its place among events of the same `ts`
    (`seq`)."""

    event: BaseModel  # or its fast twin (schemas/wire.py)
    origin: RawMessage | None
    seq: int


@dataclass
class Ordering:
    """The events held and waiting, and the sources they came from. Reads-complete figures
    (`caught_up`, `held_until`) are the read tracker's, passed in."""

    config: LiveConfig
    # Held events as (ts, event, origin) in arrival order, per bucket of event time (int(ts *
    # BUCKETS_PER_S)); the buckets' keys in a heap of their own.
    buckets: dict[int, list] = field(default_factory=dict)
    keys: list[int] = field(default_factory=list)
    count: int = 0
    sources: dict[tuple, Source] = field(default_factory=dict)
    # Past `order_at`: per source, the events that arrived ahead of the slowest, unfed, in arrival order.
    ahead: dict[tuple, list] = field(default_factory=dict)
    waiting: int = 0
    # Which failure reports wait less (`failure_lateness_s`; LiveDetector: its core's `first_failure`;
    # None: none), and the ts of the newest such held (-inf: none; one released early, past
    # `max_buffered`, counts until due: event time only rises).
    awaited: Callable[[object], bool] | None = None
    newest_failure: float = float("-inf")

    def take(self, runs: list[tuple[tuple, list[tuple]]], wall: float) -> None:
        """Hold what arrived together at `wall`, per source in arrival order (or, many held, let it
        wait: fed, as far as due, by the next `feed_waiting`)."""
        if self.ahead or self.count >= self.config.order_at:
            self.wait(runs, wall)
        else:
            for source, entries in runs:
                self.fed(source, self.hold(entries, wall), wall)

    def fed(self, source: tuple, top: float, wall: float) -> None:
        """`source`'s events up to `top` were fed at `wall`."""
        seen = self.sources.get(source)
        if seen is None:
            self.sources[source] = Source(top, wall, top)
        elif top > seen.max_ts:  # only progress in event time keeps a partition active
            seen.max_ts = top
            seen.last_wall = wall
            if top > seen.arrived:
                seen.arrived = top

    def wait(self, runs: list[tuple[tuple, list[tuple]]], wall: float) -> None:
        """Many held: each run waits behind its source's waiting events (`feed_waiting` feeds them)."""
        ahead, sources = self.ahead, self.sources
        for source, entries in runs:
            ahead.setdefault(source, []).extend(entries)
            self.waiting += len(entries)
            top = max(entries, key=_TS)[0]
            seen = sources.get(source)
            if seen is None:
                sources[source] = Source(float("-inf"), wall, top)
            elif top > seen.arrived:
                seen.arrived = top

    def feed_waiting(self, wall: float, caught_up: float, held_until: float) -> None:
        """Feed each source's waiting events, in arrival order, up to the last within AHEAD_S past the
        slowest source's newest arrival (looking LOOKAHEAD past any later): a prefix, so that a
        checkpoint can leave the rest to Kafka. Once fewer than half of `order_at` are held and
        waiting, all are fed: none can come late, they are ahead. None while event time stands still
        after a blind spell (before `held_until`, as the producers deliver what they held), unless
        `max_buffered` wait: fed, they would be held, and past `max_buffered` the oldest released
        early, out of order; waiting, they can be left to Kafka (`pause_at`). (In the spell itself,
        `held_until` infinite, they are fed: an engine that stopped reading a partition whose events
        wait may need them fed to read on, and be confirmed, and end the spell.)"""
        ahead, config = self.ahead, self.config
        if self.count + self.waiting < config.order_at // 2:
            cutoff = float("inf")
        elif wall < held_until != float("inf") and self.waiting < config.max_buffered:
            return
        else:
            cutoff = min(self.sources[source].arrived for source in self.holding(wall, caught_up)) + AHEAD_S
        for source, waiting in list(ahead.items()):
            n = 0  # up to the last within the cutoff, looking LOOKAHEAD past the last found
            for scanned, entry in enumerate(waiting, 1):
                if entry[0] <= cutoff:
                    n = scanned
                elif scanned - n > LOOKAHEAD:
                    break
            if not n:
                continue
            self.fed(source, self.hold(waiting[:n], wall), wall)
            if n == len(waiting):
                del ahead[source]
            else:
                del waiting[:n]
            self.waiting -= n

    def hold(self, entries: list[tuple], wall: float = INF) -> float:
        """Put (ts, event, origin) entries in their buckets, in order; the newest ts among them. A failure
        report `awaited` says is its rank's first, stamped no later than `wall` (plus `failure_lateness_s`:
        a producer's clock a little ahead), waits less (`newest_failure`)."""
        buckets, keys = self.buckets, self.keys
        waits_less = self.awaited is not None and self.config.failure_lateness_s < self.config.lateness_s
        awaited = self._awaited if waits_less else None
        reports, newest = FAILURE_REPORTS, self.newest_failure
        latest = wall + self.config.failure_lateness_s
        key = bucket = None
        top = float("-inf")
        for entry in entries:  # ts is within the contract's bounds (the decider checks its input's)
            ts = entry[0]
            if ts > top:
                top = ts
            if (awaited is not None and newest < ts <= latest and type(entry[1]) in reports
                    and awaited(entry[1])):
                newest = ts
            at = int(ts * BUCKETS_PER_S)
            if at != key:  # a partition's events mostly share one bucket
                key = at
                bucket = buckets.get(key)
                if bucket is None:
                    bucket = buckets[key] = []
                    heapq.heappush(keys, key)
            bucket.append(entry)
        self.count += len(entries)
        self.newest_failure = newest
        return top

    def _awaited(self, report: object) -> bool:
        """`awaited`, where a report it cannot judge (a core bug) waits as any event."""
        try:
            return self.awaited(report)
        except Exception:
            log.exception("could not tell whether %s is its rank's first failure report; it waits lateness_s",
                          type(report).__name__)
            return False

    def expect(self, sources: list[tuple], wall: float) -> None:
        """Sources known to have events on their way: each holds the watermark back until it
        delivers or has been quiet for `idle_s`."""
        for source in sources:
            self.sources.setdefault(source, Source(float("-inf"), wall))

    def holding(self, wall: float, caught_up: float) -> dict[tuple, float]:
        """The sources holding event time back at `wall` (not quiet for `idle_s`, quiet counted only
        as far as reads are known complete: up to `caught_up`, or a source's own `read_at`; or with
        events waiting), with how far they have delivered: the newest event time fed, or for a source
        with events waiting, the time of the first of them."""
        idle_s, ahead = self.config.idle_s, self.ahead
        return {source: ahead[source][0][0] if source in ahead else seen.max_ts
                for source, seen in self.sources.items()
                if min(wall, max(caught_up, seen.read_at)) - seen.last_wall < idle_s or source in ahead}

    def watermark(self, wall: float, caught_up: float) -> float | None:
        """Where event time stands at `wall` (None: nothing known yet, or no time read since the
        last event): the slowest holding source less `lateness_s`, each moved on at wall-clock pace
        since it last delivered as far as its reads are known complete (`through`); with none
        holding, the newest event time moved on as far as reads are known complete (`caught_up`).
        While a failure report is held (`failure_lateness_s` set below `lateness_s`), up to the newest
        of them (just past it) if the slowest less `failure_lateness_s` is past it."""
        if not self.sources:
            return None
        active = self.holding(wall, caught_up)
        if active:
            ahead, sources = self.ahead, self.sources
            slowest = min(at if source in ahead else through(sources[source], at, wall, caught_up)
                          for source, at in active.items())
        else:
            # Everything is quiet: event time goes on from the newest event, at wall-clock pace, as
            # far as reads are known complete (not at all while the detector is blind).
            read_until = min(wall, caught_up)
            newest = max(self.sources.values(), key=lambda s: s.max_ts)
            last_wall = max(s.last_wall for s in self.sources.values())
            if read_until <= last_wall:
                return None
            slowest = newest.max_ts + (read_until - last_wall)
        mark = slowest - self.config.lateness_s
        if self.newest_failure != -INF:  # a failure report held waits less, and lets no later event pass
            # (just past it: a deadline at its ts, a group it settled, fires only once time is past it)
            past = math.nextafter(self.newest_failure, INF)
            mark = max(mark, min(slowest - self.config.failure_lateness_s, past))
        return mark

    def take_due(self, mark: float) -> tuple[list[tuple], int]:
        """The held events with `ts` <= `mark`, then the oldest others while more than `max_buffered`
        are held, in `ts` order (arrival order among equal ones): taken out of the buffer; and how
        many of them were the others (released early)."""
        keys, buckets = self.keys, self.buckets
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
        self.count -= len(due)
        if self.newest_failure <= mark:
            self.newest_failure = -INF
        forced = 0
        over = self.count - self.config.max_buffered
        while over > 0:  # the buffer is full: the oldest go early, in order
            bucket = buckets[keys[0]]
            bucket.sort(key=_TS)
            early = bucket[:over]
            del bucket[:over]
            if not bucket:
                del buckets[heapq.heappop(keys)]
            due += early
            forced += len(early)
            self.count -= len(early)
            over -= len(early)
        return due, forced

    def held_entries(self, waiting: bool = True) -> list[tuple[float, object, RawMessage | None]]:
        """The held events as (ts, event, origin), those of equal `ts` in arrival order, then those
        waiting unless not `waiting`."""
        buckets = self.buckets
        held = [entry for key in sorted(buckets) for entry in buckets[key]]
        return held + [entry for entries in self.ahead.values() for entry in entries] if waiting else held

    def resume(self, held: list[Held], sources: dict[tuple, tuple[float, float]], wall: float) -> None:
        """Hold a checkpoint's events again, and take its sources as (newest event time, quiet
        seconds) at `wall`."""
        self.hold([(item.event.ts, item.event, item.origin)
                   for item in sorted(held, key=lambda item: (item.event.ts, item.seq))], wall)
        for source, (max_ts, quiet_s) in sources.items():
            self.sources[source] = Source(max_ts, wall - quiet_s, max_ts)
