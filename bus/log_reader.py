"""Reading whole topics as an event log: from the first offset to the end, then live.

Manual assignment of every partition, no committed offsets: a reader always starts at the
beginning, which is what rebuilding state from a log needs.
"""

from __future__ import annotations

import logging
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka import KafkaError as RdKafkaError

from bus.admin import wait_for_topics
from bus.errors import KafkaError
from bus.message import Record, parse_message
from bus.producer import EventProducer
from bus.settings import KafkaSettings
from schemas import DeadLettered

log = logging.getLogger(__name__)


class LogReader:
    """`catch_up()` reads every partition up to its end as of the call; `poll()` then reads on.

    Invalid values are skipped with a warning while catching up (they were dead-lettered
    when first seen live) and sent to `dlq` when read live.
    """

    def __init__(self, settings: KafkaSettings, topics: list[str], *,
                 dlq: EventProducer | None = None) -> None:
        self._settings = settings
        self._topics = list(topics)
        self._dlq = dlq
        self._client: Consumer | None = None
        self._parts: list[TopicPartition] = []
        self.skipped = 0

    def _open(self, timeout_s: float) -> Consumer:
        # A topic created a moment ago (or on a broker still busy starting) may not have a leader
        # yet: wait for it a while rather than call it missing.
        wait_for_topics(self._settings, list(self._topics), min(timeout_s, 30.0))
        client = Consumer(self._settings.client_config(**{
            "group.id": f"trainmedic-log-{uuid.uuid4().hex[:12]}",  # required, never committed
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }), logger=log)
        try:
            meta = client.list_topics(timeout=timeout_s)
        except KafkaException as err:
            client.close()
            raise KafkaError(f"no broker answered at {self._settings.bootstrap}: {err.args[0].str()}",
                             retryable=True) from None
        parts = []
        for topic in self._topics:
            if topic not in meta.topics or meta.topics[topic].error is not None:
                client.close()
                raise KafkaError(f"topic {topic} does not exist: run `trainmedic topics create`")
            parts += [TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.topics[topic].partitions]
        client.assign(parts)
        self._parts = parts
        return client

    def catch_up(self, timeout_s: float = 60.0) -> list[Record]:
        """Every valid event up to the end offsets of now, in partition order."""
        client = self._client = self._client or self._open(timeout_s)
        ends = {}
        for part in self._parts:
            low, high = client.get_watermark_offsets(TopicPartition(part.topic, part.partition),
                                                     timeout=timeout_s)
            if high > low:
                ends[(part.topic, part.partition)] = high
        records: list[Record] = []
        deadline = time.monotonic() + timeout_s
        while ends:
            if time.monotonic() > deadline:
                raise KafkaError(f"could not read {len(ends)} partitions to their end in {timeout_s:.0f}s",
                                 retryable=True)
            for msg in client.consume(1000, 0.5):
                if self._parsed(msg, records, live=False):
                    where = (msg.topic(), msg.partition())
                    if where in ends and msg.offset() + 1 >= ends[where]:
                        del ends[where]
        return records

    def poll(self, timeout_s: float = 1.0) -> list[Record]:
        """The next valid events, possibly none."""
        client = self._client = self._client or self._open(10.0)
        records: list[Record] = []
        for msg in client.consume(1000, timeout_s):
            self._parsed(msg, records, live=True)
        return records

    def _parsed(self, msg, records: list[Record], *, live: bool) -> bool:
        """Adds the message's event to `records` if valid; False for an error that is no message."""
        err = msg.error()
        if err is not None:
            if err.code() != RdKafkaError._PARTITION_EOF:
                if err.fatal():
                    raise KafkaError(f"log reader failed: {err.str()}", code=err.name())
                log.warning("log reader: %s (retrying)", err.str())
            return False
        parsed = parse_message(self._settings.topics, msg.topic(), msg.partition(), msg.offset(),
                               msg.key(), msg.value(), time.time())
        if not isinstance(parsed, DeadLettered):
            records.append(parsed)
            return True
        self.skipped += 1
        log.warning("invalid event %s[%d]@%d skipped: %s", msg.topic(), msg.partition(), msg.offset(),
                    parsed.reason)
        if live and self._dlq is not None:
            self._dlq.send(self._settings.topics.dlq, parsed, key=parsed.source_topic)
        return True

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
