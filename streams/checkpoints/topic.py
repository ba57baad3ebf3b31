"""Where both engines keep their checkpoints: the compacted topic `<app-id>-checkpoints`, one
partition keyed by the app id, so compaction keeps the last (docs/streams.md, "State: one checkpoint,
both engines, with its offsets").
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import Consumer, TopicPartition

from trainmedic.bus import clients
from trainmedic.bus.admin import ensure_topic, wait_for_topics
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.reader import watermark
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import KafkaError
from trainmedic.streams.checkpoints.contents import (
    Checkpoint,
    CheckpointError,
    NewerCheckpoint,
    Owner,
    decode_checkpoint,
    foreign,
)

log = logging.getLogger(__name__)

MAX_CHECKPOINT_BYTES = 64 * 1024 * 1024  # before compression: the topic's limit holds whatever lz4 does
CHECKPOINT_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "max.message.bytes": str(MAX_CHECKPOINT_BYTES),
    "segment.ms": str(3_600_000),  # so that compaction can drop old checkpoints within hours
}
READ_WAIT_S = 30.0


class CheckpointTopic:
    """The checkpoints of the detector `app_id`. Clients are made on first use."""

    def __init__(self, settings: KafkaSettings, app_id: str) -> None:
        self.settings, self.app_id = settings, app_id
        self.topic = f"{app_id}-checkpoints"
        topics = settings.topics
        self.owner = Owner(settings.topic_prefix, (topics.gpu, topics.node, topics.worker))
        self.too_big = False  # the last checkpoint offered was over the limit
        self._producer: EventProducer | None = None

    def read_last(self) -> Checkpoint | None:
        """The last checkpoint (creating the topic if need be); None if there is none or it cannot
        be used (logged). Raises KafkaError for one written by a newer trainmedic."""
        ensure_topic(self.settings, self.topic, partitions=1, config=CHECKPOINT_TOPIC_CONFIG)
        wait_for_topics(self.settings, [self.topic])
        consumer = clients.consumer(self.settings, {
            "group.id": f"{self.app_id}-checkpoint-reader", "enable.auto.commit": False,
        }, logger=log)
        try:
            data = self._last_value(consumer)
        finally:
            consumer.close()
        if data is None:
            return None
        if data == b"":
            log.warning("the last checkpoint was deleted (state too big): starting afresh")
            return None
        try:
            saved = decode_checkpoint(data)
        except NewerCheckpoint as err:
            raise KafkaError(f"{err}: run that version, or delete topic {self.topic} "
                             "to start afresh") from None
        except CheckpointError as err:
            log.error("%s: starting afresh, as on a first start", err)
            return None
        why = foreign(saved, self.owner)
        if why is not None:
            log.error("the last checkpoint on %s is another deployment's or another stage's (%s): not "
                      "resumed, starting as configured. If two deployments share the app id %r, give each "
                      "its own --app-id; a detector switched between --stage all and decide starts afresh",
                      self.topic, why, self.app_id)
            return None
        return saved

    def _last_value(self, consumer: Consumer) -> bytes | None:
        """The last message's value (b"" for a tombstone), None for an empty topic."""
        low, high = watermark(consumer, (self.topic, 0), timeout_s=10)  # created a moment ago, perhaps
        if high <= low:
            return None
        consumer.assign([TopicPartition(self.topic, 0, high - 1)])
        deadline = time.monotonic() + READ_WAIT_S
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().fatal():
                    raise KafkaError(f"reading {self.topic}: {msg.error().str()}", code=msg.error().name())
                continue
            return msg.value() or b""
        raise KafkaError(f"could not read the last checkpoint from {self.topic} within {READ_WAIT_S:.0f} s")

    @property
    def producer(self) -> EventProducer:
        if self._producer is None:
            self._producer = EventProducer(self.settings, client_id=f"{self.app_id}-checkpoints", config={
                "message.max.bytes": MAX_CHECKPOINT_BYTES + 1024 * 1024, "compression.type": "lz4",
            })
        return self._producer

    def write(self, data: bytes) -> None:
        """Send `data` as the last checkpoint, or a tombstone once if it is too big (logged)."""
        if len(data) > MAX_CHECKPOINT_BYTES:
            if not self.too_big:
                log.error("detector checkpoint is %d bytes, over the %d allowed: not saved, "
                          "a restart starts afresh (see docs/streams.md)", len(data), MAX_CHECKPOINT_BYTES)
                self.producer.send(self.topic, None, key=self.app_id)  # a stale checkpoint is worse than none
            self.too_big = True
            return
        self.producer.send(self.topic, data, key=self.app_id)
        self.too_big = False

    def poll(self) -> None:
        """Serve delivery reports (a failed delivery is raised by the producer)."""
        if self._producer is not None:
            self._producer.client.poll(0)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
