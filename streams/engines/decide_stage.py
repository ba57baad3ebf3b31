"""The deciding detector of a sharded deployment (`trainmedic detector --stage decide`): the consumer
engine's loop over the ingest stage's batches, each source offset applied once (docs/streams.md,
"Detection for a large cluster: a sharded detector").
"""

from __future__ import annotations

import logging
import time

import msgspec
from confluent_kafka import KafkaException

from trainmedic.bus.admin import ensure_topic, wait_for_topics
from trainmedic.bus.message import RawMessage
from trainmedic.bus.reader import watermarks
from trainmedic.schemas import DeadLettered, encode
from trainmedic.schemas.bounds import MAX_TS
from trainmedic.schemas.wire import retimed
from trainmedic.streams.checkpoints.contents import Offsets, Owner
from trainmedic.streams.engines.batches import (
    EVENTS_PARTITIONS,
    EVENTS_TOPIC_CONFIG,
    Batch,
    Carriers,
    SourceOffsets,
    decode_batch,
    events_topic,
)
from trainmedic.streams.engines.consumer import DetectorService
from trainmedic.streams.event_time import ClockBound
from trainmedic.streams.live_config import LiveConfig
from trainmedic.streams.pipeline import Output

log = logging.getLogger(__name__)


def new_events(sources: SourceOffsets, batch: Batch, dlq: str, wall: float,
               bound: ClockBound | None = None) -> tuple[list[tuple], list[Output]]:
    """The events of `batch` not applied before, as the live detector holds them: (ts, event, origin),
    the origin without a value (a checkpoint re-encodes the event); and dead letters for any whose
    time is out of the contract's bounds, which ingest never sends (its twins are decoded unchecked:
    one NaN would stop the decider at every restart), or out of the decider's clock `bound` (the
    defaults when None) at `wall`: ingest checked it at its own clock, this one's decides."""
    topic, partition = batch.source
    held, dead = [], []
    bound = bound or ClockBound.of(LiveConfig())
    for entry in sources.new_entries(batch):
        event = entry.event
        ts = event.ts
        reason = None
        if not 0.0 <= ts <= MAX_TS:  # NaN too
            reason = f"not an ingest event: ts {ts!r} is out of bounds"
        elif (skewed := bound.judge(ts, entry.timestamp_ms / 1000, wall)) is not None:
            if skewed.used_at is None:
                reason = skewed.reason
            else:  # far behind its stamp: ingest dead-lettered and retimed it unless its bound is wider
                event, ts = retimed(event, skewed.used_at), skewed.used_at
        if reason is not None:
            log.warning("dead-lettered %s[%d]@%d from %s: %s", topic, partition, entry.offset, batch.source,
                        reason)
            dead.append(Output(dlq, topic.encode(), encode(DeadLettered.of(
                ts=wall, reason=reason, topic=topic, partition=partition, offset=entry.offset, key=entry.key,
                value=encode(event)))))
            continue
        origin = RawMessage(topic, partition, entry.offset, entry.timestamp_ms, entry.key, None)
        held.append((ts, event, origin))
    return held, dead


class DeciderService(DetectorService):
    """`run()` as `DetectorService`, on the events topic."""

    REWINDS = True  # events waiting are read again after a restart: their carriers' too (`Carriers`)

    def __init__(self, *args, events_partitions: int = EVENTS_PARTITIONS, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.events_topic = events_topic(self.config.app_id)
        self.events_partitions = events_partitions
        self.sources = SourceOffsets()
        self.carriers = Carriers()
        self._telemetry: list[tuple[str, int]] = []
        self._carried_by: dict[tuple[str, int], tuple[str, int]] = {}  # telemetry -> events partition
        # Its checkpoints name the events topic too: a whole detector never resumes one, nor it a whole one's.
        owner = self._checkpoints.owner
        self._checkpoints.owner = Owner(owner.prefix, (*owner.topics, self.events_topic))

    def input_topics(self) -> list[str]:
        return [self.events_topic]

    def _partitions(self) -> list[tuple[str, int]]:
        ensure_topic(self.settings, self.events_topic, partitions=self.events_partitions,
                     config=EVENTS_TOPIC_CONFIG)
        topics = self.settings.topics
        counts = wait_for_topics(self.settings, [topics.gpu, topics.node, topics.worker])
        self._telemetry = [(name, p) for name, count in counts.items() for p in range(count)]
        return super()._partitions()

    def _add_new_partitions(self) -> None:
        """Partitions added to the events topic, and to the telemetry topics: a telemetry partition the
        ingest stage has not announced yet counts as unread (`read_offsets`)."""
        super()._add_new_partitions()
        try:
            meta = self._consumer.list_topics(timeout=10).topics
        except KafkaException as err:
            self._warn("partitions", f"could not look for new partitions: {err.args[0].str()} (retrying)")
            return
        topics = self.settings.topics
        now = [(name, p) for name in (topics.gpu, topics.node, topics.worker) if name in meta
               for p in sorted(meta[name].partitions)]
        added = [tp for tp in now if tp not in self._telemetry]
        if added:  # read by the ingest stage from their beginning: hold event time back for them
            self.pipeline.live.expect(added, time.time())
            log.info("telemetry partitions added since the start: %s",
                     ", ".join(f"{t}[{p}]" for t, p in added))
        self._telemetry = now

    def _resumed(self, saved: Offsets) -> None:
        self.sources.next = {tp: offset for tp, offset in saved.items() if tp[0] != self.events_topic}

    def _expect_start(self) -> None:
        marks = watermarks(self._consumer, self._telemetry, timeout_s=10)
        behind = [tp for tp in self._telemetry if self.sources.next.get(tp, 0) < marks[tp][1]]
        self.pipeline.live.expect(behind, time.time())

    def _expect_new(self, offsets: Offsets) -> None:
        """Partitions added to the events topic: nothing of telemetry's to wait for."""

    def read_offsets(self) -> Offsets:
        known = self.sources.next
        return {tp: known.get(tp, 0) for tp in self._telemetry} | known

    def _routes(self) -> dict[tuple[str, int], tuple[str, int]]:
        """Per telemetry partition, the events partition its batches came on (as seen, not as
        computed: the ingest stage counts the events topic's partitions on its own)."""
        return self._carried_by

    def saved_offsets(self) -> Offsets:
        """The events topic's offsets rewound to what carried the events waiting (their telemetry
        partitions' are rewound to the first of them by `encode_checkpoint`), and the telemetry's."""
        return self.carriers.rewind(self.offsets, self.pipeline.live.waiting_entries()) | self.sources.next

    def _take(self, messages: list, wall: float) -> list[Output]:
        out: list[Output] = []
        runs = []
        for message in self._read(messages):
            try:
                batch = decode_batch(message.value)
            except (msgspec.DecodeError, msgspec.ValidationError, TypeError) as err:
                out += self._not_a_batch(message, err, wall)
                continue
            self._carried_by[batch.source] = message.where
            held, dead = new_events(self.sources, batch, self.settings.topics.dlq, wall, self.pipeline.bound)
            out += dead
            if held:
                runs.append((batch.source, held))
                self.carriers.carried(batch, message.where, message.offset)
            self.pipeline.stats.events += len(held)
        if runs:
            out += self.pipeline.on_runs(runs, wall)
        return out

    def _not_a_batch(self, message: RawMessage, err: Exception, wall: float) -> list[Output]:
        """Only the ingest stage writes the events topic: anything else is kept on the dlq."""
        reason = f"not an ingest batch: {err}"
        log.warning("dead-lettered %s[%d]@%d: %s", message.topic, message.partition, message.offset, reason)
        self.pipeline.stats.dead_lettered += 1
        letter = DeadLettered.of(ts=wall, reason=reason, topic=message.topic, partition=message.partition,
                                 offset=message.offset, key=message.key, value=message.value)
        return [Output(self.settings.topics.dlq, message.topic.encode(), encode(letter))]
