"""Telemetry that never waits for Kafka: events go into librdkafka's bounded queue or are dropped
and counted, and the count is told in one log line once the broker takes events again."""

from __future__ import annotations

import logging
from contextlib import suppress

from confluent_kafka import KafkaError as RdKafkaError
from confluent_kafka import Message
from pydantic import BaseModel

from trainmedic.bus import metrics
from trainmedic.bus.producer import EventProducer
from trainmedic.common.drops import DropLedger
from trainmedic.common.errors import DeliveryError, KafkaError

log = logging.getLogger(__name__)


class Outbox:
    """A non-blocking front to an EventProducer. One thread sends, polls and flushes; any may count drops."""

    def __init__(self, producer: EventProducer, *, what: str = "events") -> None:
        self._producer = producer
        self._what = what
        self.drops = DropLedger()
        self.sent = 0
        self.delivered = 0  # events Kafka took
        self._reported = 0  # delivery reports served, delivered or failed
        self._flushed = False  # the final flush counted every unreported event: later reports count nothing
        # both at 0 from the start: a producer that dropped nothing shows 0, not nothing
        metrics.EVENTS_SENT.labels(what)
        metrics.EVENTS_DROPPED.labels(what)

    @property
    def dropped(self) -> int:
        """Events lost so far: refused by a full queue, or never delivered (producer_drops)."""
        return self.drops.total

    def send(self, topic: str, event: BaseModel | bytes, key: str | None) -> bool:
        """Queue one event; False (and counted) when it had to be dropped. Never raises, never waits."""
        # Each failed delivery was counted by `_delivered` when it happened: clear, don't raise.
        with suppress(DeliveryError):
            self._producer.raise_failures()
        try:
            self._producer.send(topic, event, key, block_s=0, on_delivery=self._delivered)
        except KafkaError as err:
            self._drop(1, str(err))
            return False
        self.sent += 1
        metrics.EVENTS_SENT.labels(self._what).inc()
        return True

    def poll(self) -> None:
        """Serve delivery reports (and so the drop accounting) without waiting."""
        self._producer.client.poll(0)

    def flush(self, timeout_s: float) -> None:
        """Deliver what is queued within `timeout_s`; what is left is counted as dropped."""
        # Failed deliveries were counted one by one; what has no report yet is counted here (by our own
        # count: librdkafka's queue length can still include a message whose report was just served).
        with suppress(DeliveryError):
            self._producer.flush(timeout_s)
        left = self.sent - self._reported
        self._flushed = True
        if left:
            self._drop(left, "shutdown")
            log.warning("%s: %d not delivered within the %.1fs flush deadline", self._what, left, timeout_s)
        log.info("%s: %d sent, %d dropped in all (producer_drops)", self._what, self.sent, self.dropped)

    def _delivered(self, err: RdKafkaError | None, msg: Message) -> None:
        self._reported += 1
        if self._flushed:
            return
        if err is not None:
            self._drop(1, f"delivery to {msg.topic()} failed: {err.str()}")
            return
        self.delivered += 1
        ended = self.drops.delivered()
        if ended:
            log.warning("%s: Kafka takes events again; %d were dropped meanwhile (%d in all, producer_drops)",
                        self._what, ended, self.drops.total)

    def count_dropped(self, count: int, why: str) -> None:
        """Count events dropped before they reached the outbox (e.g. a full queue in front of it)."""
        self._drop(count, why)

    def _drop(self, count: int, why: str) -> None:
        metrics.EVENTS_DROPPED.labels(self._what).inc(count)
        if self.drops.drop(count):
            log.warning("%s: dropping events rather than waiting for Kafka: %s", self._what, why)
