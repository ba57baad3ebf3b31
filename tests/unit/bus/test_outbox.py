"""The outbox never blocks and never hides a loss: drops are counted and told when Kafka is back."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from trainmedic.bus.outbox import Outbox
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.drops import DropLedger
from trainmedic.common.errors import DeliveryError, KafkaError
from trainmedic.schemas import GpuSample

SAMPLE = GpuSample(ts=1.0, node="n01", gpu=0)


def test_the_ledger_counts_an_outage_and_its_end() -> None:
    ledger = DropLedger()
    assert ledger.delivered() == 0
    assert ledger.drop() is True
    assert ledger.drop(4) is False
    assert (ledger.total, ledger.outage) == (5, 5)
    assert ledger.delivered() == 5
    assert ledger.delivered() == 0
    assert ledger.drop() is True and ledger.total == 6


class StandInProducer:
    """EventProducer's surface: a queue of `room` messages whose deliveries the test decides."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.waiting: list[Any] = []
        self.client = SimpleNamespace(poll=lambda timeout: 0)
        self.failures: list[DeliveryError] = []

    def send(self, topic: str, event: object, key: str | None, *, block_s: float, on_delivery: Any) -> None:
        assert block_s == 0  # the outbox must never ask to wait
        if len(self.waiting) >= self.room:
            raise KafkaError("producer queue full", code="_QUEUE_FULL", retryable=True)
        self.waiting.append(on_delivery)

    def deliver(self, ok: bool) -> None:
        callback = self.waiting.pop(0)
        err = None if ok else SimpleNamespace(str=lambda: "Local: Message timed out")
        if err is not None:
            self.failures.append(DeliveryError("delivery failed"))
        callback(err, SimpleNamespace(topic=lambda: "t"))

    def raise_failures(self) -> None:
        if self.failures:
            self.failures.clear()
            raise DeliveryError("an earlier delivery failed")

    def flush(self, timeout_s: float) -> None:
        if self.waiting:
            raise DeliveryError(f"{len(self.waiting)} messages not delivered")

    def pending(self) -> int:
        return len(self.waiting)


def test_drops_are_counted_and_told_once_kafka_takes_events_again(caplog: pytest.LogCaptureFixture) -> None:
    producer = StandInProducer(room=2)
    outbox = Outbox(producer, what="gpu samples")  # type: ignore[arg-type]  # EventProducer's surface
    with caplog.at_level(logging.INFO, logger="trainmedic.bus.outbox"):
        assert [outbox.send("t", SAMPLE, "n01") for _ in range(5)] == [True, True, False, False, False]
        producer.deliver(ok=False)  # a message that timed out while the broker was away
        assert outbox.send("t", SAMPLE, "n01") is True  # an earlier failure never stops the next send
        assert outbox.dropped == 4 and outbox.delivered == 0
        producer.deliver(ok=True)
    assert outbox.dropped == 4 and outbox.sent == 3 and outbox.delivered == 1
    warnings = [r.message for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert warnings[0].startswith("gpu samples: dropping events rather than waiting for Kafka")
    assert warnings[1] == (
        "gpu samples: Kafka takes events again; 4 were dropped meanwhile (4 in all, producer_drops)"
    )


def test_what_is_left_at_the_flush_deadline_counts_as_dropped() -> None:
    producer = StandInProducer(room=10)
    outbox = Outbox(producer)  # type: ignore[arg-type]  # EventProducer's surface
    for _ in range(3):
        outbox.send("t", SAMPLE, "n01")
    outbox.flush(0.0)
    assert outbox.dropped == 3


def test_with_no_broker_the_real_queue_bound_holds_and_the_rest_is_counted() -> None:
    settings = KafkaSettings(bootstrap="127.0.0.1:1", topic_prefix="nobroker.")
    outbox = Outbox(EventProducer(settings, max_buffered=5))
    results = [outbox.send(settings.topics.gpu, SAMPLE, "n01") for _ in range(8)]
    assert results == [True] * 5 + [False] * 3
    assert outbox.dropped == 3
    outbox.flush(0.0)
    assert outbox.dropped == 8
