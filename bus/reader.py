"""Reading topics without a consumer group, from a start to an end or on and on: every partition assigned
directly, nothing committed; `start_offsets` and `end_offsets` are pure, `TopicReader` does the lookups.
Times are Kafka message timestamps in Unix seconds, not the `ts` in an event.
"""

from __future__ import annotations

import logging
import time
import uuid
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaException, TopicPartition
from confluent_kafka import KafkaError as RdKafkaError

from trainmedic.bus import clients
from trainmedic.bus.admin import wait_for_topics
from trainmedic.bus.message import RawMessage, Record, parse_message
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import KafkaError
from trainmedic.schemas import DeadLettered

__all__ = ["EARLIEST", "END_GRACE_S", "LATEST", "NOW", "At", "End", "Item", "Marks", "Start", "TopicReader",
           "Where", "end_due", "end_offsets", "locate", "offsets_at", "partition_count", "partition_of",
           "start_offsets", "watermark", "watermarks"]

log = logging.getLogger(__name__)
T = TypeVar("T")
LEADER_WAIT_S = 0.1  # between requests a broker refused as not ready (`watermark`)
# librdkafka repeats every failed connection attempt; a reader reports errors itself.
_rdkafka_log = logging.getLogger(f"{__name__}.librdkafka")

Where = tuple[str, int]  # topic, partition
Marks = dict[Where, tuple[int, int]]  # low and high watermark: the first offset held, the next to come

EARLIEST: Literal["earliest"] = "earliest"
LATEST: Literal["latest"] = "latest"
NOW: Literal["now"] = "now"  # as an end: the end offsets as of opening

# A future end time becomes end offsets this long after it passes, so that messages produced
# just before it and still in flight are included.
END_GRACE_S = 2.0


@dataclass(frozen=True)
class At:
    """A moment in Kafka message time: the first message produced at or after `ts` (Unix seconds)."""

    ts: float

    @property
    def ms(self) -> int:
        return int(self.ts * 1000)


# earliest, latest, one offset N for every partition, an offset per partition, or a time.
# Given offsets are kept inside what each partition holds (retention may have removed some).
Start = Literal["earliest", "latest"] | int | Mapping[Where, int] | At
# None: no end, read on; "now": the end offsets as of opening; or a time.
End = Literal["now"] | At | None


def start_offsets(start: Start, marks: Marks, found: Mapping[Where, int] | None = None) -> dict[Where, int]:
    """Each partition's first offset to read: a concrete one, never the lazy logical end, so that
    nothing sent after opening is missed. `found` answers a time start: offsets_for_times' offset
    per partition, -1 where nothing was produced at or after it (then: the end)."""
    out = {}
    for where, (low, high) in marks.items():
        if start == EARLIEST:
            out[where] = low
        elif start == LATEST:
            out[where] = high
        elif isinstance(start, At):
            out[where] = found[where] if found[where] >= 0 else high
        else:  # a given offset, kept inside what the partition holds
            out[where] = min(max(start if isinstance(start, int) else start[where], low), high)
    return out


def end_offsets(end: End, marks: Marks, found: Mapping[Where, int] | None = None) -> dict[Where, int | None]:
    """Each partition's first offset not to read; None where there is none (no end) or it is not
    known yet (an end time still to come: `found` is None until `end_due`)."""
    if end == NOW:
        return {where: high for where, (_, high) in marks.items()}
    if end is None or found is None:
        return dict.fromkeys(marks)
    return {where: found[where] if found[where] >= 0 else high for where, (_, high) in marks.items()}


def end_due(end: End, now: float) -> bool:
    """Whether an end time has passed (with the grace for messages in flight) at `now`."""
    return isinstance(end, At) and now >= end.ts + END_GRACE_S


def watermark(client: Consumer, where: Where, timeout_s: float,
              until: float | None = None) -> tuple[int, int]:
    """Low and high watermark of one partition, as the broker has them now. A topic created a moment
    ago has leaders in the metadata a moment before they lead it, and librdkafka does not ask again
    for watermarks: a refusal that passes by itself (`clients.not_ready`) is asked again until
    `until` (monotonic; `timeout_s` from now if None), each request given `timeout_s`. Raises
    KafkaException as librdkafka does."""
    until = time.monotonic() + timeout_s if until is None else until
    while True:
        try:
            return client.get_watermark_offsets(TopicPartition(*where), timeout=timeout_s)
        except KafkaException as err:
            if not clients.not_ready(err.args[0]) or time.monotonic() + LEADER_WAIT_S >= until:
                raise
        time.sleep(LEADER_WAIT_S)


def watermarks(client: Consumer, parts: list[Where], timeout_s: float) -> Marks:
    """Low and high watermark of each partition, as the broker has them now (`watermark`): each
    request given `timeout_s`, refusals asked again for `timeout_s` in all."""
    until = time.monotonic() + timeout_s
    return {where: watermark(client, where, timeout_s, until) for where in parts}


def offsets_at(client: Consumer, parts: list[Where], at: At, timeout_s: float) -> dict[Where, int]:
    """Per partition, the first offset produced at or after `at`; -1 where there is none (yet)."""
    found = client.offsets_for_times([TopicPartition(t, p, at.ms) for t, p in parts], timeout=timeout_s)
    for part in found:
        if part.error is not None:
            raise KafkaException(part.error)
    return {(part.topic, part.partition): part.offset for part in found}


def locate(client: Consumer, parts: list[Where], start: Start, timeout_s: float,
           marks: Marks | None = None) -> dict[Where, int]:
    """`start_offsets` with the lookups it needs (`marks` if already known); warns where a given
    offset is gone. Raises KafkaException as librdkafka does."""
    if not parts:
        return {}
    marks = marks if marks is not None else watermarks(client, parts, timeout_s)
    found = offsets_at(client, parts, start, timeout_s) if isinstance(start, At) else None
    offsets = start_offsets(start, marks, found)
    if isinstance(start, Mapping):
        for (topic, partition), offset in offsets.items():
            if offset != start[(topic, partition)]:
                low, high = marks[(topic, partition)]
                log.warning("%s[%d]: offset %d is gone (the partition holds %d..%d): reading from %d",
                            topic, partition, start[(topic, partition)], low, high, offset)
    return offsets


def partition_of(key: str, partitions: int) -> int:
    """The partition librdkafka's default partitioner (`consistent_random`) picks for a non-empty key.

    That is CRC-32 of the key bytes modulo the partition count. (Java clients default to
    murmur2: a producer in another language must set its partitioner to match.)
    """
    if partitions < 1:
        raise ValueError("a topic has at least one partition")
    return zlib.crc32(key.encode("utf-8")) % partitions


def partition_count(settings: KafkaSettings, topic: str, timeout_s: float = 10.0) -> int:
    """How many partitions `topic` has, once it has leaders; raises KafkaError when it does not exist."""
    return wait_for_topics(settings, [topic], timeout_s)[topic]


@dataclass
class _Partition:
    next: int  # the next offset to read
    end: int | None  # the first offset not to read; None: no end, or an end time not yet resolved
    opened_at: int  # the end offset when the reader opened: what is before it is the backlog
    done: bool = False


Item = RawMessage | Record | DeadLettered


class _Missing(Exception):
    """A topic not in the metadata, or without leaders: created a moment ago, or not at all."""


def fetch(consumer, wait_s: float, most: int) -> list:
    """Messages read now: the first as it comes (up to `wait_s`), then what is already fetched, up
    to `most` in all. (consume(n, timeout) waits for n messages: at a low rate that is the whole
    timeout, an incident, an ack or a command held up by it.)"""
    first = consumer.poll(wait_s)
    if first is None:
        return []
    return [first, *consumer.consume(most - 1, 0)] if most > 1 else [first]


class TopicReader:
    """Messages of whole `topics` or of single `partitions`, from `start` to `end`.

    `batches()` reads until every partition reached its end (without one: its end as of
    opening, the backlog); `poll()` reads on. Items are `RawMessage`s, or with `validate`
    each a `Record` or a `DeadLettered` with the reason; dead letters read past the backlog
    go to `dlq` (those in the backlog were dead-lettered when first seen live).

    Opening waits up to `timeout_s` for topics created moments ago to get leaders, then
    raises KafkaError saying what to do: no broker answered, or a topic does not exist.
    """

    def __init__(
        self, settings: KafkaSettings, topics: list[str] | None = None, *,
        partitions: list[Where] | None = None, start: Start = EARLIEST, end: End = None,
        validate: bool = False, dlq: EventProducer | None = None, name: str | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        if (topics is None) == (partitions is None):
            raise ValueError("give either topics or partitions")
        self._settings = settings
        self._topics = list(topics or [])
        self._asked = list(partitions or [])
        self._start = start
        self._end = end
        self._validate = validate
        self._dlq = dlq
        self._name = name or settings.topics.owned("read")  # under the prefix: the deployment's own
        self._timeout_s = timeout_s
        self._client: Consumer | None = None
        self._parts: dict[Where, _Partition] = {}

    def open(self) -> TopicReader:
        """Assign every partition at its start offset (done on first read, or now)."""
        if self._client is not None:
            return self
        _rdkafka_log.setLevel(logging.DEBUG if log.isEnabledFor(logging.DEBUG) else logging.CRITICAL)
        client = clients.consumer(self._settings, {
            "group.id": f"{self._name}-{uuid.uuid4().hex[:12]}",  # librdkafka wants one; never joined
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",  # an offset retention removes mid-read: lose no more than it did
            # tells where a partition ends when its last offsets hold no message (e.g. compacted)
            "enable.partition.eof": True,
        }, logger=_rdkafka_log)
        try:
            self._parts = self._retrying(lambda timeout_s: self._locate(client, timeout_s))
        except BaseException:
            client.close()
            raise
        for where, part in self._parts.items():
            self._check_done(where, part)  # before assigning: nothing to pause yet
        self._client = client
        client.assign([TopicPartition(t, p, part.next) for (t, p), part in self._parts.items()
                       if not part.done])
        log.info("%s: reading %s", self._name,
                  ", ".join(f"{t}[{p}] from {part.next}" for (t, p), part in self._parts.items()))
        return self

    def _retrying(self, call: Callable[[float], T]) -> T:
        """`call(timeout_s)` again while the broker says it is not ready, up to the reader's timeout."""
        deadline = time.monotonic() + self._timeout_s
        missing: _Missing | None = None
        while True:
            try:
                return call(max(0.5, deadline - time.monotonic()))
            except _Missing as err:
                missing = err
                if time.monotonic() >= deadline:
                    raise KafkaError(str(err)) from None
                time.sleep(0.2)
            except KafkaException as err:
                code = err.args[0]
                if clients.not_ready(code) and time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                if missing is not None:  # the broker did answer, the last look just ran out of time
                    raise KafkaError(str(missing)) from None
                raise clients.broker_error(self._settings, f"cannot read {', '.join(self._names())}", code,
                                           self._timeout_s) from None

    def _names(self) -> list[str]:
        return self._topics or sorted({t for t, _ in self._asked})

    def _locate(self, client: Consumer, timeout_s: float) -> dict[Where, _Partition]:
        parts = self._partitions(client, timeout_s)
        marks = watermarks(client, parts, timeout_s)
        starts = locate(client, parts, self._start, timeout_s, marks)
        found = None
        if end_due(self._end, time.time()):
            found = offsets_at(client, parts, self._end, timeout_s)
        ends = end_offsets(self._end, marks, found)
        return {where: _Partition(starts[where], ends[where], marks[where][1]) for where in parts}

    def _partitions(self, client: Consumer, timeout_s: float) -> list[Where]:
        meta = client.list_topics(timeout=timeout_s).topics
        parts = []
        for topic in self._names():
            found = meta.get(topic)
            if found is None or found.error is not None or not found.partitions or any(
                    p.leader < 0 for p in found.partitions.values()):
                raise _Missing(f"topic {topic} does not exist (or has no leader): run `trainmedic topics "
                               f"create` (or check TRAINMEDIC_TOPIC_PREFIX)")
            held = sorted(found.partitions)
            parts += [(topic, p) for p in held if not self._asked or (topic, p) in self._asked]
        missing = sorted(set(self._asked) - set(parts))
        if missing:
            raise KafkaError(f"no partition {', '.join(f'{t}[{p}]' for t, p in missing)}")
        return parts

    def batches(self, poll_s: float = 0.5, give_up_s: float | None = None) -> Iterator[list[Item]]:
        """Batches of what was read (possibly empty) until every partition reached its end, or
        without one its end as of opening; raises KafkaError after `give_up_s` if given."""
        self.open()
        deadline = None if give_up_s is None else time.monotonic() + give_up_s
        while not all(self._reached(p) for p in self._parts.values()):
            if deadline is not None and time.monotonic() > deadline:
                behind = sum(not self._reached(p) for p in self._parts.values())
                raise KafkaError(f"could not read {behind} partitions to their end in {give_up_s:.0f}s",
                                 retryable=True)
            if end_due(self._end, time.time()) and any(p.end is None for p in self._parts.values()):
                self._resolve_end_time()
            yield self.poll(poll_s)

    def _reached(self, part: _Partition) -> bool:
        return part.done if self._end is not None else part.next >= part.opened_at

    def poll(self, timeout_s: float = 1.0, max_messages: int = 1000) -> list[Item]:
        """What arrives within `timeout_s` (possibly nothing): as soon as one message does, with
        those already fetched, at most `max_messages` (`fetch`)."""
        out: list[Item] = []
        for msg in fetch(self.open()._client, timeout_s, max_messages):
            item = self._take(msg)
            if item is not None:
                out.append(item)
        return out

    def progress(self) -> str:
        done = sum(self._reached(p) for p in self._parts.values())
        return f"{done}/{len(self._parts)} partitions done"

    def _take(self, msg) -> Item | None:
        err = msg.error()
        where = (msg.topic(), msg.partition())
        part = self._parts.get(where)
        if err is not None:
            if err.code() == RdKafkaError._PARTITION_EOF:
                if part is not None:  # skips offsets that hold no message
                    part.next = max(part.next, msg.offset())
                    self._check_done(where, part)
            elif err.fatal():
                raise KafkaError(f"{self._name}: reading failed: {err.str()}", code=err.name())
            else:
                log.warning("%s: %s (retrying)", self._name, err.str())
            return None
        if part is None or part.done:
            return None
        kind, stamp_ms = msg.timestamp()
        if (part.end is None and isinstance(self._end, At) and kind != TIMESTAMP_NOT_AVAILABLE
                and stamp_ms >= self._end.ms):
            part.end = msg.offset()  # the first message at or after the end time
        if part.end is not None and msg.offset() >= part.end:
            part.next = max(part.next, msg.offset())
            self._check_done(where, part)
            return None
        part.next = msg.offset() + 1
        self._check_done(where, part)
        raw = RawMessage.of(msg)
        return self._validated(raw, live=raw.offset >= part.opened_at) if self._validate else raw

    def _validated(self, raw: RawMessage, *, live: bool) -> Record | DeadLettered:
        parsed = parse_message(self._settings.topics, raw.topic, raw.partition, raw.offset, raw.key,
                               raw.value, time.time(), timestamp_ms=raw.timestamp_ms)
        if isinstance(parsed, DeadLettered) and live and self._dlq is not None:
            self._dlq.send(self._settings.topics.dlq, parsed, key=parsed.source_topic)
        return parsed

    def _check_done(self, where: Where, part: _Partition) -> None:
        if not part.done and part.end is not None and part.next >= part.end:
            part.done = True
            if self._client is not None:
                self._client.pause([TopicPartition(*where)])

    def _resolve_end_time(self) -> None:
        open_parts = [where for where, part in self._parts.items() if part.end is None]

        def lookup(timeout_s: float) -> dict[Where, int | None]:
            marks = watermarks(self._client, open_parts, timeout_s)
            return end_offsets(self._end, marks, offsets_at(self._client, open_parts, self._end, timeout_s))

        for where, end in self._retrying(lookup).items():
            part = self._parts[where]
            part.end = end
            self._check_done(where, part)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
