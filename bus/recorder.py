"""Read a stretch of the telemetry topics, bounded in offsets or message time, without a group.

Every partition is assigned directly and nothing is committed, so a recording is invisible
to every consumer group. Times are Kafka message timestamps in Unix seconds: by default the
producer's clock when it sent the message.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaException, TopicPartition
from confluent_kafka import KafkaError as RdKafkaError

from bus.errors import KafkaError
from bus.message import parse_message
from bus.settings import KafkaSettings
from schemas import DeadLettered

log = logging.getLogger(__name__)
# librdkafka repeats every failed connection attempt; the recorder reports errors itself.
_rdkafka_log = logging.getLogger(f"{__name__}.librdkafka")

# A future end time becomes end offsets this long after it passes, so that messages produced
# just before it and still in flight are included.
END_GRACE_S = 2.0
Where = tuple[str, int]  # topic, partition


@dataclass
class Counts:
    """What a recording wrote, per topic, and what it skipped."""

    written: dict[str, int] = field(default_factory=dict)
    skipped: int = 0

    @property
    def total(self) -> int:
        return sum(self.written.values())

    def summary(self) -> str:
        per_topic = ", ".join(f"{topic} {count:,}" for topic, count in self.written.items())
        return f"wrote {self.total:,} events ({per_topic}); skipped {self.skipped:,} invalid"


@dataclass
class Batch:
    """Valid raw values in partition order, and `topic[partition]@offset` + reason of invalid ones."""

    values: list[bytes] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class _Bounds:
    next: int  # the next offset to read
    end: int | None  # first offset not to record; None until a future end time has passed
    done: bool = False


class Recorder:
    """The telemetry messages from a start (offset or time) to an end (time, or the end of now).

    `start_offset` is 'earliest', 'latest' or N (clamped to what the partition holds);
    otherwise the start is the first message produced at or after `start_ts`. The end is the
    first message produced at or after `end_ts`, or, without one, the partition's end offset
    when `connect` ran.
    """

    def __init__(self, settings: KafkaSettings, *, start_offset: str | int | None = None,
                 start_ts: float | None = None, end_ts: float | None = None) -> None:
        if (start_offset is None) == (start_ts is None):
            raise ValueError("give exactly one of start_offset and start_ts")
        self._settings = settings
        self._start_offset = start_offset
        self._start_ts = start_ts
        self._end_ts = end_ts
        self._client: Consumer | None = None
        self._bounds: dict[Where, _Bounds] = {}
        self._assigned = False
        self.counts = Counts()

    def connect(self, timeout_s: float = 10.0) -> None:
        """Assign every telemetry partition at its start offset; raises KafkaError if Kafka fails."""
        _rdkafka_log.setLevel(logging.DEBUG if log.isEnabledFor(logging.DEBUG) else logging.CRITICAL)
        try:
            client = self._client = Consumer(self._settings.client_config(**{
                # librdkafka wants a group id; no group is joined, nothing committed
                "group.id": f"trainmedic-record-{uuid.uuid4().hex[:12]}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
            }), logger=_rdkafka_log)
        except KafkaException as err:
            raise KafkaError(f"cannot create a Kafka consumer: {err}") from None
        topics = self._settings.topics
        names = [topics.gpu, topics.node, topics.worker]
        self.counts.written = dict.fromkeys(names, 0)
        try:
            meta = client.list_topics(timeout=timeout_s)
        except KafkaException as err:
            raise KafkaError(f"no broker answered at {self._settings.bootstrap} within {timeout_s:g}s "
                             f"({err.args[0].str()})", retryable=True) from None
        parts = []
        for name in names:
            if name not in meta.topics or meta.topics[name].error is not None:
                raise KafkaError(f"topic {name} does not exist: run `trainmedic topics create`")
            parts += [TopicPartition(name, p) for p in sorted(meta.topics[name].partitions)]
        starts = self._offsets_at(parts, self._start_ts, timeout_s) if self._start_ts is not None else {}
        ends = self._ends(parts, timeout_s)
        for part in parts:
            where = (part.topic, part.partition)
            low, high = self._watermarks(part, timeout_s)
            if self._start_offset == "earliest":
                start = low
            elif self._start_offset == "latest":
                start = high
            elif isinstance(self._start_offset, int):
                start = min(max(self._start_offset, low), high)
            else:
                start = starts[where] if starts[where] >= 0 else high
            bounds = self._bounds[where] = _Bounds(start, ends.get(where))
            self._check_done(where, bounds)
        client.assign([TopicPartition(t, p, b.next) for (t, p), b in self._bounds.items() if not b.done])
        self._assigned = True

    def batches(self, poll_s: float = 0.5) -> Iterator[Batch]:
        """Batches of what was read (possibly empty), until every partition reached its end."""
        client = self._client
        if client is None:
            raise KafkaError("connect() first")
        while not all(b.done for b in self._bounds.values()):
            end_time_passed = self._end_ts is not None and time.time() >= self._end_ts + END_GRACE_S
            if end_time_passed and any(b.end is None for b in self._bounds.values()):
                self._resolve_end_time()
            batch = Batch()
            for msg in client.consume(1000, poll_s):
                self._take(msg, batch)
            yield batch

    def progress(self) -> str:
        done = sum(b.done for b in self._bounds.values())
        return f"{done}/{len(self._bounds)} partitions done"

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _take(self, msg, batch: Batch) -> None:
        err = msg.error()
        where = (msg.topic(), msg.partition())
        bounds = self._bounds.get(where)
        if err is not None:
            if err.code() == RdKafkaError._PARTITION_EOF and bounds is not None:
                bounds.next = max(bounds.next, msg.offset())  # skips offsets that hold no message
                self._check_done(where, bounds)
            elif err.fatal():
                raise KafkaError(f"recording failed: {err.str()}", code=err.name())
            elif err.code() != RdKafkaError._PARTITION_EOF:
                log.warning("record: %s (retrying)", err.str())
            return
        if bounds is None or bounds.done:
            return
        kind, stamp_ms = msg.timestamp()
        if bounds.end is None and kind != TIMESTAMP_NOT_AVAILABLE and stamp_ms >= self._end_ts * 1000:
            bounds.end = msg.offset()  # the first message at or after the end time
        if bounds.end is not None and msg.offset() >= bounds.end:
            bounds.next = max(bounds.next, msg.offset())
            self._check_done(where, bounds)
            return
        bounds.next = msg.offset() + 1
        parsed = parse_message(self._settings.topics, msg.topic(), msg.partition(), msg.offset(),
                               msg.key(), msg.value(), time.time())
        if isinstance(parsed, DeadLettered):
            self.counts.skipped += 1
            batch.skipped.append((f"{msg.topic()}[{msg.partition()}]@{msg.offset()}", parsed.reason))
        else:
            self.counts.written[msg.topic()] += 1
            batch.values.append(msg.value())
        self._check_done(where, bounds)

    def _check_done(self, where: Where, bounds: _Bounds) -> None:
        if not bounds.done and bounds.end is not None and bounds.next >= bounds.end:
            bounds.done = True
            if self._assigned:
                self._client.pause([TopicPartition(*where)])

    def _ends(self, parts: list[TopicPartition], timeout_s: float) -> dict[Where, int]:
        """End offsets known now: the end of each partition, or where an end time already passed."""
        if self._end_ts is None:
            return {(p.topic, p.partition): self._watermarks(p, timeout_s)[1] for p in parts}
        if time.time() < self._end_ts + END_GRACE_S:
            return {}
        return self._end_offsets_at_time(parts, timeout_s)

    def _resolve_end_time(self, timeout_s: float = 10.0) -> None:
        open_parts = [TopicPartition(t, p) for (t, p), b in self._bounds.items() if b.end is None]
        for where, end in self._end_offsets_at_time(open_parts, timeout_s).items():
            bounds = self._bounds[where]
            bounds.end = end
            self._check_done(where, bounds)

    def _end_offsets_at_time(self, parts: list[TopicPartition], timeout_s: float) -> dict[Where, int]:
        found = self._offsets_at(parts, self._end_ts, timeout_s)
        return {where: offset if offset >= 0 else self._watermarks(TopicPartition(*where), timeout_s)[1]
                for where, offset in found.items()}

    def _offsets_at(self, parts: list[TopicPartition], ts: float, timeout_s: float) -> dict[Where, int]:
        """Per partition, the first offset produced at or after `ts`; -1 where there is none yet."""
        query = [TopicPartition(p.topic, p.partition, int(ts * 1000)) for p in parts]
        try:
            found = self._client.offsets_for_times(query, timeout=timeout_s)
        except KafkaException as err:
            raise KafkaError(f"cannot look up offsets by time: {err.args[0].str()}",
                             code=err.args[0].name()) from None
        return {(p.topic, p.partition): p.offset for p in found}

    def _watermarks(self, part: TopicPartition, timeout_s: float) -> tuple[int, int]:
        try:
            return self._client.get_watermark_offsets(TopicPartition(part.topic, part.partition),
                                                      timeout=timeout_s)
        except KafkaException as err:
            raise KafkaError(f"cannot read the offsets of {part.topic}[{part.partition}]: "
                             f"{err.args[0].str()}", code=err.args[0].name()) from None
