"""A consumer that hands out validated events and sends everything else to the dlq; a crash
re-delivers, it never skips (docs/security.md, "Poison records").
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka import KafkaError as RdKafkaError

from trainmedic.bus import clients
from trainmedic.bus.message import Record, parse_message
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import KafkaError
from trainmedic.schemas import DeadLettered

log = logging.getLogger(__name__)


class EventConsumer:
    """Consumes trainmedic topics in a consumer group; invalid values go to the dlq with the reason.

    Offsets are stored only for messages handed out and then asked past (the next `poll`) or
    dead-lettered and flushed to the dlq: a crash re-delivers, it never skips. A dead letter the
    dlq does not take is given up after a bounded number of tries and counted, never raised
    (`EventProducer`): a poison record must not stop the consumer."""

    def __init__(
        self, settings: KafkaSettings, topics: list[str], group_id: str, *,
        dlq: EventProducer | None = None, from_beginning: bool = True,
        config: dict[str, object] | None = None,
    ) -> None:
        self._settings = settings
        self._topics = settings.topics
        self._subscription = list(topics)
        self._config = {
            "group.id": group_id,
            "auto.offset.reset": "earliest" if from_beginning else "latest",
            "enable.auto.commit": True,
            "enable.auto.offset.store": False,
            **(config or {}),
        }
        self._dlq = dlq
        self._client: Consumer | None = None
        self._to_store: list[TopicPartition] = []
        self.dead_lettered = 0

    @property
    def client(self) -> Consumer:
        if self._client is None:
            self._client = clients.consumer(self._settings, self._config, logger=log)
            self._client.subscribe(self._subscription)
        return self._client

    def poll(self, timeout_s: float = 1.0, max_records: int = 500) -> list[Record]:
        """The next valid events (possibly none). Marks the previous batch as processed."""
        self._store_processed()
        records: list[Record] = []
        for msg in self.client.consume(max_records, timeout_s):
            err = msg.error()
            if err is not None:
                self._on_error(err)
                continue
            parsed = parse_message(
                self._topics, msg.topic(), msg.partition(), msg.offset(),
                msg.key(), msg.value(), time.time(), timestamp_ms=msg.timestamp()[1],
            )
            if isinstance(parsed, DeadLettered):
                self._dead_letter(parsed)
            else:
                records.append(parsed)
            self._to_store.append(TopicPartition(msg.topic(), msg.partition(), msg.offset() + 1))
        return records

    def _dead_letter(self, letter: DeadLettered) -> None:
        self.dead_lettered += 1
        log.warning(
            "dead-lettered %s[%d]@%d: %s", letter.source_topic, letter.partition,
            letter.offset, letter.reason,
        )
        if self._dlq is not None:
            self._dlq.send(self._topics.dlq, letter, key=letter.source_topic)

    def _store_processed(self) -> None:
        if not self._to_store:
            return
        if self._dlq is not None:
            self._dlq.flush()  # a dead letter is safe before its offset is committed
        try:
            self.client.store_offsets(offsets=self._to_store)
        except KafkaException as err:  # e.g. a rebalance took the partition away
            log.info("offsets not stored (%s); they will be re-delivered", err.args[0].str())
        self._to_store = []

    @staticmethod
    def _on_error(err: RdKafkaError) -> None:
        if err.code() == RdKafkaError._PARTITION_EOF:
            return
        if err.fatal():
            raise KafkaError(f"consumer failed: {err.str()}", code=err.name())
        log.warning("consumer: %s (retrying)", err.str())

    def close(self) -> None:
        if self._client is not None:
            self._store_processed()
            self._client.close()
            self._client = None

    def __enter__(self) -> EventConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
