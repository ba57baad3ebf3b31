"""Reading topics as they were from a point in time: every partition, from the offset of a time
(or the beginning) to the end as of opening, streamed; then on, live.

No consumer group, nothing committed: for tools that read a log (the incident log, exports).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka import KafkaError as RdKafkaError

from bus.errors import KafkaError
from bus.message import RawMessage
from bus.settings import KafkaSettings

log = logging.getLogger(__name__)

# Errors a broker gives for a topic created moments ago; they pass within seconds.
_NOT_READY = frozenset({RdKafkaError.NOT_LEADER_FOR_PARTITION, RdKafkaError.LEADER_NOT_AVAILABLE,
                        RdKafkaError.UNKNOWN_TOPIC_OR_PART})


class TopicScan:
    """`backlog()` yields what the topics hold from `start_ts` (default: the beginning) up to their
    end as of the first call; `poll()` then returns what arrives. Raises KafkaError (with a
    message for people) when the broker does not answer within `timeout_s` or a topic is missing.
    """

    def __init__(self, settings: KafkaSettings, topics: list[str], *, start_ts: float | None = None,
                 timeout_s: float = 10.0) -> None:
        self._settings = settings
        self._topics = list(topics)
        self._start_ts = start_ts
        self._timeout_s = timeout_s
        self._client: Consumer | None = None
        self._ends: dict[tuple[str, int], int] = {}

    def _open(self) -> Consumer:
        client = Consumer(self._settings.client_config(**{
            "group.id": f"trainmedic-scan-{uuid.uuid4().hex[:12]}",  # required, never committed
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }), logger=log)
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                starts = self._locate(client)
                break
            except KafkaException as err:
                code = err.args[0]
                if code.code() in _NOT_READY and time.monotonic() < deadline:
                    time.sleep(0.2)  # a topic created moments ago has no leader yet
                    continue
                client.close()
                if code.code() in (RdKafkaError._TRANSPORT, RdKafkaError._TIMED_OUT):
                    raise KafkaError(f"no Kafka broker answered at {self._settings.bootstrap} within "
                                     f"{self._timeout_s:g}s ({code.str()})", retryable=True) from None
                raise KafkaError(f"cannot read {', '.join(self._topics)}: {code.str()}", code=code.name(),
                                 retryable=code.retriable()) from None
            except KafkaError:
                client.close()
                raise
        client.assign([TopicPartition(t, p, o) for (t, p), o in starts.items()])
        return client

    def _locate(self, client: Consumer) -> dict[tuple[str, int], int]:
        """Each partition's start offset; records the end of those that hold something to read."""
        parts = self._partitions(client)
        starts = self._starts(client, parts)
        self._ends = {}
        for part in parts:
            low, high = client.get_watermark_offsets(part, timeout=self._timeout_s)
            start = starts[(part.topic, part.partition)]
            if high > (low if start == OFFSET_BEGINNING else start):
                self._ends[(part.topic, part.partition)] = high
        return starts

    def _partitions(self, client: Consumer) -> list[TopicPartition]:
        meta = client.list_topics(timeout=self._timeout_s)
        parts = []
        for topic in self._topics:
            if topic not in meta.topics or meta.topics[topic].error is not None:
                raise KafkaError(f"topic {topic} does not exist: run `trainmedic topics create` "
                                 f"(or check TRAINMEDIC_TOPIC_PREFIX)")
            parts += [TopicPartition(topic, p) for p in sorted(meta.topics[topic].partitions)]
        return parts

    def _starts(self, client: Consumer, parts: list[TopicPartition]) -> dict[tuple[str, int], int]:
        """Each partition's first offset at or after start_ts (the end if none), or the beginning."""
        if self._start_ts is None:
            return {(p.topic, p.partition): OFFSET_BEGINNING for p in parts}
        at_ms = int(self._start_ts * 1000)
        found = client.offsets_for_times([TopicPartition(p.topic, p.partition, at_ms) for p in parts],
                                         timeout=self._timeout_s)
        starts = {}
        for part in found:
            offset = part.offset
            if offset < 0:  # nothing at or after that time: start at the end
                offset = client.get_watermark_offsets(part, timeout=self._timeout_s)[1]
            starts[(part.topic, part.partition)] = offset
        return starts

    def backlog(self) -> Iterator[RawMessage]:
        """Every message from the start up to the end offsets of when the scan opened."""
        if self._client is None:
            self._client = self._open()
        ends = dict(self._ends)
        while ends:
            batch = self._consume(0.5)
            for msg in batch:
                where = (msg.topic, msg.partition)
                if where in ends and msg.offset + 1 >= ends[where]:
                    del ends[where]
                yield msg
            if not batch and ends:  # e.g. the last offsets hold no message a consumer sees
                at = self._client.position([TopicPartition(t, p) for t, p in ends])
                for part in at:
                    if part.offset >= ends[(part.topic, part.partition)]:
                        del ends[(part.topic, part.partition)]

    def poll(self, timeout_s: float = 1.0) -> list[RawMessage]:
        """What arrived after the backlog (possibly nothing) within `timeout_s`."""
        if self._client is None:
            self._client = self._open()
        return self._consume(timeout_s)

    def _consume(self, timeout_s: float) -> list[RawMessage]:
        out = []
        for msg in self._client.consume(500, timeout_s):
            err = msg.error()
            if err is not None:
                if err.fatal():
                    raise KafkaError(f"reading failed: {err.str()}", code=err.name())
                if err.code() != RdKafkaError._PARTITION_EOF:
                    log.warning("reading: %s (retrying)", err.str())
                continue
            out.append(RawMessage.of(msg))
        return out

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> TopicScan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
