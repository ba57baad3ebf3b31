"""The detector's default engine: one plain Kafka consumer loop around `Pipeline`.

It assigns itself every partition of the three telemetry topics (one detector sees all
telemetry: correlation joins node and job state), reads them in batches, and sends incidents
and dead letters with an idempotent producer. A tick moves event time on while the topics are
quiet. Checkpoints (`streams/checkpoint.py`) go to a compacted topic of its own,
`<app-id>-checkpoints`: state, held events and offsets together, so a restart resumes exactly.
Offsets are also committed to the consumer group `<app-id>`, only so that lag can be watched.
Faust's per-message path is several times slower (docs/streams.md, "Throughput").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka import KafkaError as RdKafkaError

from streams.checkpoint import Checkpoint, CheckpointError, Offsets, decode_checkpoint, encode_checkpoint
from streams.core import Detector
from streams.pipeline import Pipeline
from streams.snapshots import Cadence
from trainmedic.errors import KafkaError
from trainmedic.kafka import EventProducer, wait_for_topics
from trainmedic.kafka.admin import ensure_topic
from trainmedic.settings import KafkaSettings

log = logging.getLogger(__name__)

MAX_CHECKPOINT_BYTES = 60 * 1024 * 1024
CHECKPOINT_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "max.message.bytes": str(64 * 1024 * 1024),
    "segment.ms": str(3_600_000),  # so that compaction can drop old checkpoints within hours
}

# Where to start a partition the checkpoint does not cover: "earliest", "latest" or Unix seconds.
Start = str | float


@dataclass(frozen=True)
class ServiceConfig:
    app_id: str = "trainmedic-detector"
    start: Start = "latest"
    tick_s: float = 0.25
    checkpoint_every_s: float = 1.0
    batch: int = 2000
    report_every_s: float = 60.0

    @property
    def checkpoint_topic(self) -> str:
        return f"{self.app_id}-checkpoints"


class DetectorService:
    """`run()` until `stopping()` says so; then a last checkpoint and a clean close."""

    def __init__(self, settings: KafkaSettings, pipeline: Pipeline, config: ServiceConfig) -> None:
        self.settings, self.pipeline, self.config = settings, pipeline, config
        self.offsets: Offsets = {}
        self._cadence = Cadence(config.checkpoint_every_s)
        self._too_big = False
        self._consumer = Consumer(settings.client_config(**{
            "group.id": config.app_id, "enable.auto.commit": False, "enable.partition.eof": False,
        }), logger=log)
        self._out = EventProducer(settings, client_id=f"{config.app_id}-out")
        self._checkpoints = EventProducer(settings, client_id=f"{config.app_id}-checkpoints", config={
            "message.max.bytes": MAX_CHECKPOINT_BYTES + 1024 * 1024, "compression.type": "none",
        })

    def run(self, stopping: Callable[[], bool]) -> None:
        try:
            self._start()
            self._loop(stopping)
            self._checkpoint(time.monotonic(), force=True)
        finally:
            self._consumer.close()
            self._out.close()
            self._checkpoints.close()

    def _start(self) -> None:
        topics = self.settings.topics
        telemetry = wait_for_topics(self.settings, [topics.gpu, topics.node, topics.worker])
        ensure_topic(self.settings, self.config.checkpoint_topic, partitions=1,
                     config=CHECKPOINT_TOPIC_CONFIG)
        wait_for_topics(self.settings, [self.config.checkpoint_topic])
        saved = self._read_checkpoint()
        if saved is not None:
            live = self.pipeline.live
            live.detector = Detector(live.detector.config, saved.state)
            live.resume(saved.watermark, saved.held)
            log.info("detector state restored from %s (event time %.3f, %d events held)",
                     self.config.checkpoint_topic, saved.state.clock, len(saved.held))
        partitions = [(name, p) for name, count in telemetry.items() for p in range(count)]
        fresh = [tp for tp in partitions if saved is None or tp not in saved.offsets]
        self.offsets = {tp: saved.offsets[tp] for tp in partitions if tp not in fresh}
        self.offsets.update(self._start_offsets(fresh))
        self._consumer.assign([TopicPartition(t, p, o) for (t, p), o in self.offsets.items()])
        where = f"{len(fresh)} from {self.config.start!r}" if fresh else "none new"
        log.info("detector ready: reading %d partitions of %d topics (%d from the checkpoint, %s)",
                 len(partitions), len(telemetry), len(partitions) - len(fresh), where)

    def _read_checkpoint(self) -> Checkpoint | None:
        where = TopicPartition(self.config.checkpoint_topic, 0)
        low, high = self._consumer.get_watermark_offsets(where, timeout=10)
        if high <= low:
            return None
        self._consumer.assign([TopicPartition(where.topic, 0, high - 1)])
        deadline = time.monotonic() + 30
        try:
            while time.monotonic() < deadline:
                msg = self._consumer.poll(0.5)
                if msg is None:
                    continue
                if msg.error():
                    self._on_error(msg.error())
                    continue
                if msg.value() is None:
                    log.warning("the last checkpoint was deleted (state too big): starting afresh")
                    return None
                return decode_checkpoint(msg.value())
        except CheckpointError as err:
            log.error("%s: starting afresh", err)
            return None
        finally:
            self._consumer.unassign()
        raise KafkaError(f"could not read the last checkpoint from {where.topic} within 30 s")

    def _start_offsets(self, partitions: list[tuple[str, int]]) -> Offsets:
        """Explicit offsets (not logical ones), so that 'ready' means nothing later is missed."""
        start, out = self.config.start, {}
        if isinstance(start, float):
            found = self._consumer.offsets_for_times(
                [TopicPartition(t, p, int(start * 1000)) for t, p in partitions], timeout=10)
            ends = {tp: None for tp in partitions}
            for tp in found:
                ends[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
            for tp, offset in ends.items():
                out[tp] = offset if offset is not None else self._watermarks(tp)[1]
            return out
        for tp in partitions:
            low, high = self._watermarks(tp)
            out[tp] = low if start == "earliest" else high
        return out

    def _watermarks(self, tp: tuple[str, int]) -> tuple[int, int]:
        return self._consumer.get_watermark_offsets(TopicPartition(*tp), timeout=10)

    def _loop(self, stopping: Callable[[], bool]) -> None:
        pipeline, config, send = self.pipeline, self.config, self._send
        offsets = self.offsets
        last_tick = last_commit = last_report = time.monotonic()
        reported = 0
        while not stopping():
            messages = self._consumer.consume(config.batch, config.tick_s)
            wall = time.time()
            for msg in messages:
                if msg.error():
                    self._on_error(msg.error())
                    continue
                topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
                outs = pipeline.on_message(topic, partition, offset, msg.key(), msg.value(), wall)
                if outs:
                    send(outs)
                offsets[(topic, partition)] = offset + 1
            now = time.monotonic()
            if now - last_tick >= config.tick_s:
                send(pipeline.on_tick(wall))
                last_tick = now
            self._out.client.poll(0)
            self._checkpoints.client.poll(0)  # a checkpoint is not waited for: the last one holds
            self._checkpoint(now)
            if now - last_commit >= 1.0:
                self._commit()
                last_commit = now
            if now - last_report >= config.report_every_s:
                stats = pipeline.stats
                log.info("%d events in the last %.0f s (%.0f/s), %d incidents and %d dead letters in all; "
                         "holding %d, event time %.3f", stats.events - reported, now - last_report,
                         (stats.events - reported) / (now - last_report), stats.incidents,
                         stats.dead_lettered, pipeline.live.buffered, pipeline.live.detector.state.clock)
                reported, last_report = stats.events, now

    def _send(self, outs) -> None:
        for out in outs:
            self._out.send(out.topic, out.value, key=out.key.decode())

    def _checkpoint(self, now: float, force: bool = False) -> None:
        live = self.pipeline.live
        clock = live.detector.state.clock
        if not force and not self._cadence.due(clock, now):
            return
        began = time.monotonic()
        self._out.flush()  # every incident the checkpoint has decided is delivered before it
        data = encode_checkpoint(live, self.offsets)
        topic, key = self.config.checkpoint_topic, self.config.app_id
        if len(data) > MAX_CHECKPOINT_BYTES:
            if not self._too_big:
                log.error("detector checkpoint is %d bytes compressed, over the %d allowed: not saved, "
                          "a restart starts afresh (see docs/streams.md)", len(data), MAX_CHECKPOINT_BYTES)
                self._checkpoints.send(topic, None, key=key)  # a stale checkpoint is worse than none
            self._too_big = True
        else:
            self._checkpoints.send(topic, data, key=key)
            self._too_big = False
        self._commit()
        self._cadence.saved(clock, now, time.monotonic() - began)

    def _commit(self) -> None:
        if not self.offsets:
            return
        try:
            self._consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in self.offsets.items()],
                                  asynchronous=True)
        except KafkaException as err:  # only lag monitoring reads these
            log.info("offsets not committed: %s", err.args[0].str())

    @staticmethod
    def _on_error(err: RdKafkaError) -> None:
        if err.fatal():
            raise KafkaError(f"consumer failed: {err.str()}", code=err.name())
        log.warning("consumer: %s (retrying)", err.str())
