"""Read one partition of a topic without a consumer group, and find the partition of a key.

An executor reads only its own node's commands: the partition its node key hashes to.
"""

from __future__ import annotations

import logging
import time
import zlib

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka import KafkaError as RdKafkaError

from bus.admin import wait_for_topics
from bus.errors import KafkaError
from bus.message import Record, parse_message
from bus.settings import KafkaSettings
from schemas import DeadLettered

log = logging.getLogger(__name__)

# Errors a broker gives for a topic it has just created; they pass within seconds.
_NOT_READY = frozenset({
    RdKafkaError.NOT_LEADER_FOR_PARTITION, RdKafkaError.LEADER_NOT_AVAILABLE,
    RdKafkaError.UNKNOWN_TOPIC_OR_PART, RdKafkaError._TIMED_OUT,
})


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


class PartitionReader:
    """Validated events from one assigned partition; the caller keeps the position.

    Starts at `offset` when given, else at the first message produced at or after
    `start_ts` (Unix seconds), else at the end as it is when the client is created.
    Commits nothing.
    """

    def __init__(
        self, settings: KafkaSettings, topic: str, partition: int, *,
        offset: int | None = None, start_ts: float | None = None, client_id: str = "trainmedic",
    ) -> None:
        self._topics = settings.topics
        self._where = TopicPartition(topic, partition)
        self._offset = offset
        self._start_ts = start_ts
        self._config = settings.client_config(**{
            "group.id": f"{client_id}-unused",  # librdkafka wants one; nothing is committed
            "client.id": client_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
        })
        self._client: Consumer | None = None

    @property
    def client(self) -> Consumer:
        if self._client is None:
            try:
                client = Consumer(self._config, logger=log)
            except KafkaException as err:
                raise KafkaError(f"cannot create a Kafka consumer: {err}") from None
            start = self._start_offset(client)
            client.assign([TopicPartition(self._where.topic, self._where.partition, start)])
            log.info("reading %s[%d] from offset %d", self._where.topic, self._where.partition, start)
            self._client = client
        return self._client

    def _start_offset(self, client: Consumer, timeout_s: float = 15.0) -> int:
        """A concrete offset (never the lazy OFFSET_END, which could skip a message sent meanwhile).

        Retries while the broker says it is not ready (e.g. no leader yet for a new topic).
        """
        if self._offset is not None:
            return self._offset
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self._start_ts is not None:
                    at = TopicPartition(self._where.topic, self._where.partition, int(self._start_ts * 1000))
                    found = client.offsets_for_times([at], timeout=5.0)[0]
                    if found.offset >= 0:
                        return found.offset
                return client.get_watermark_offsets(self._where, timeout=5.0)[1]
            except KafkaException as err:
                code = err.args[0]
                if not (code.retriable() or code.code() in _NOT_READY) or time.monotonic() >= deadline:
                    raise KafkaError(f"cannot look up offsets: {code.str()}", code=code.name(),
                                     retryable=code.retriable()) from None
                log.info("offset lookup: %s (retrying)", code.str())
                time.sleep(0.2)

    def poll(self, timeout_s: float = 1.0, max_records: int = 100) -> list[Record | DeadLettered]:
        """The next messages, each a valid Record or a DeadLettered with the reason."""
        out: list[Record | DeadLettered] = []
        for msg in self.client.consume(max_records, timeout_s):
            err = msg.error()
            if err is not None:
                if err.fatal():
                    raise KafkaError(f"consumer failed: {err.str()}", code=err.name())
                if err.code() != RdKafkaError._PARTITION_EOF:
                    log.warning("reader: %s (retrying)", err.str())
                continue
            out.append(parse_message(
                self._topics, msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                time.time(),
            ))
        return out

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
