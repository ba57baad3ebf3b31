"""What the ingest stage hands the deciding detector: validated telemetry in batches, per partition,
each source offset applied once (docs/streams.md, "Detection for a large cluster: a sharded detector").
"""

from __future__ import annotations

import logging
import zlib
from collections import deque
from dataclasses import dataclass, field

import msgspec

from trainmedic.schemas.wire import TrustedTelemetry

log = logging.getLogger(__name__)

MAX_EVENTS = 2_000  # per batch (a few hundred kB of 1 Hz samples)
MAX_BATCH_BYTES = 4 * 1024 * 1024  # per batch, encoded: an event may hold a traceback of 1 MB
MAX_MESSAGE_BYTES = 8 * 1024 * 1024 + 65_536  # the events topic's and the ingest producer's limit
EVENTS_PARTITIONS = 12  # the events topic's partitions when an instance creates it
EVENTS_TOPIC_CONFIG = {
    "retention.ms": str(3_600_000),  # an hour for a stopped decider to come back; telemetry keeps a week
    "max.message.bytes": str(MAX_MESSAGE_BYTES),
}


def events_topic(app_id: str) -> str:
    return f"{app_id}-events"


class Entry(msgspec.Struct, array_like=True, frozen=True):
    """One valid event (retimed to its message's timestamp if its clock was off) and its message. The
    ingest stage puts in the event as it validated it (schemas/wire.py); the decider reads it back as
    its trusted twin (`wire.TRUSTED`), decoded without checking the contract's bounds again: only
    the detector's principal may write the events topic (bus/acls.py)."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    event: TrustedTelemetry


class Batch(msgspec.Struct, array_like=True, frozen=True):
    """The events of one telemetry partition, in its order, covering its offsets `first` to `next` - 1:
    the events and the messages dead-lettered among them. One with no events and `first == next` says
    where an ingest instance starts reading a partition it was just given."""

    topic: str
    partition: int
    first: int  # the first source offset this batch covers
    next: int  # the offset after the last it covers
    entries: list[Entry]

    @property
    def source(self) -> tuple[str, int]:
        return self.topic, self.partition


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Batch)


def encode_batch(batch: Batch) -> bytes:
    return _encoder.encode(batch)


def decode_batch(data: bytes) -> Batch:
    """Raises msgspec.ValidationError or msgspec.DecodeError for anything that is not a batch."""
    return _decoder.decode(data)


def events_partition(source: tuple[str, int], partitions: int) -> int:
    """The events topic's partition for every batch of one telemetry partition: a stable hash."""
    return zlib.crc32(f"{source[0]}\x00{source[1]}".encode()) % partitions


@dataclass
class SourceOffsets:
    """Per telemetry partition, the next source offset the decider has yet to apply. Ingest sends at
    least once (an instance that dies before committing has its partitions read again by another):
    what a batch repeats is skipped here, so every message counts once."""

    next: dict[tuple[str, int], int] = field(default_factory=dict)
    repeated: int = 0  # events skipped as already applied
    gaps: int = 0  # batches that began past the next offset expected (the messages between were gone)

    def new_entries(self, batch: Batch) -> list[Entry]:
        """The entries of `batch` not applied before, in order; notes how far its partition is read."""
        source = batch.source
        expected = self.next.get(source)
        if expected is not None and batch.next <= expected:
            self.repeated += len(batch.entries)
            return []
        if expected is not None and batch.first > expected:
            self.gaps += 1
            log.warning("%s[%d]: offsets %d to %d never reached the decider (retention removed them "
                        "before they were read?)", batch.topic, batch.partition, expected, batch.first - 1)
        self.next[source] = batch.next
        if expected is None or batch.first >= expected:
            return batch.entries
        fresh = [entry for entry in batch.entries if entry.offset >= expected]
        self.repeated += len(batch.entries) - len(fresh)
        return fresh


@dataclass
class Carriers:
    """Per telemetry partition, the events-topic messages that carried its batches lately, so that a
    decider's checkpoint can leave the events waiting unfed (`LiveConfig.order_at`) to Kafka, as a
    whole detector's does: the events topic is read again from the message that carried the first
    of them (`rewind`), and `SourceOffsets` restored to that event's offset takes only those after.
    (Saved with the checkpoint, a backlog's took it past its limit, and a tombstone replaced it.)"""

    _by_source: dict[tuple[str, int], deque] = field(default_factory=dict)  # (batch next, where, offset)

    def carried(self, batch: Batch, where: tuple[str, int], offset: int) -> None:
        """`batch`, with events new to the decider, came in the events topic's message `where`@`offset`."""
        self._by_source.setdefault(batch.source, deque()).append((batch.next, where, offset))

    def rewind(self, offsets: dict[tuple[str, int], int],
               waiting: dict[tuple[str, int], list[tuple]]) -> dict[tuple[str, int], int]:
        """The events topic's `offsets`, each moved back to the first message on it that carried an
        event waiting (`waiting`: per telemetry partition, (ts, event, origin) in arrival order, as
        `LiveDetector.waiting_entries` gives them). A telemetry partition's batches may come on two
        events partitions (an ingest instance that counted them anew): each is read again. Forgets
        the messages no waiting event needs."""
        rewound = dict(offsets)
        for source, carriers in self._by_source.items():
            entries = waiting.get(source)
            if not entries:
                carriers.clear()
                continue
            first = entries[0][2].offset
            while carriers and carriers[0][0] <= first:
                carriers.popleft()
            for _, where, offset in carriers:  # the first came in one, kept since; the others may have
                rewound[where] = min(rewound.get(where, offset), offset)  # come in another partition
        return rewound

