"""Kafka I/O against a real broker: round trips, dead letters, and a consumer that keeps going."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trainmedic.schemas as s
from tests.unit.schemas.test_schemas import EXAMPLES
from trainmedic.bus.admin import create_topics, list_topics, remove_prefix
from trainmedic.bus.consumer import EventConsumer
from trainmedic.bus.message import Record
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import DeliveryError, KafkaError

pytestmark = pytest.mark.kafka


def drain(consumer: EventConsumer, want: int, timeout_s: float = 30.0) -> list[Record]:
    records: list[Record] = []
    deadline = time.monotonic() + timeout_s
    while len(records) < want and time.monotonic() < deadline:
        records += consumer.poll(0.5)
    return records


def test_the_broker_lists_the_created_topics(kafka: KafkaSettings) -> None:
    names = list_topics(kafka)
    assert set(kafka.topics.all()) <= names


def test_a_tests_topics_are_gone_after_its_teardown(kafka: KafkaSettings) -> None:
    """What every test's teardown does (tests/conftest.py), so that `make test` leaves no topics
    behind on the user's broker (it left ~1,400 when deletes went out with an operation timeout of 0)."""
    prefix = f"{kafka.topic_prefix}gone."
    other = KafkaSettings.from_env(role="admin", bootstrap=kafka.bootstrap, topic_prefix=prefix)
    create_topics(other)
    assert len([name for name in list_topics(other) if name.startswith(prefix)]) == len(other.topics.all())
    remove_prefix(other, prefix)
    assert not [name for name in list_topics(other) if name.startswith(prefix)]


def test_every_event_type_round_trips_through_the_broker(kafka: KafkaSettings, group_id: str) -> None:
    sent = [(kafka.topics.name(suffix), event) for suffix, events in EXAMPLES.items() for event in events]
    with EventProducer(kafka) as producer:
        for topic, event in sent:
            producer.send(topic, event, key=getattr(event, "node", None) or "k")
    with EventConsumer(kafka, sorted({t for t, _ in sent}), group_id) as consumer:
        got = drain(consumer, len(sent))
    assert sorted((r.topic, s.encode(r.event)) for r in got) == sorted((t, s.encode(e)) for t, e in sent)
    assert consumer.dead_lettered == 0
    assert all(abs(r.timestamp_ms / 1000 - time.time()) < 600 for r in got)  # the broker's message time


def test_a_malformed_message_lands_in_the_dlq_and_consumption_continues(
    kafka: KafkaSettings, group_id: str,
) -> None:
    topics = kafka.topics
    good = [s.NodeHeartbeat(ts=float(i), node="n1", interval=1.0) for i in range(3)]
    with EventProducer(kafka) as producer:
        producer.send(topics.node, good[0], key="n1")
        producer.send(topics.node, b'{"type":"node_heartbeat","ts":1}', key="n1")
        producer.send(topics.node, good[1], key="n1")
        producer.send(topics.node, b"\x00not json", key="n1")
        producer.send(topics.node, good[2], key="n1")
        with EventConsumer(kafka, [topics.node], group_id, dlq=producer) as consumer:
            got = drain(consumer, 3)
            assert [r.event for r in got] == good
            assert consumer.dead_lettered == 2
    with EventConsumer(kafka, [topics.dlq], group_id + "-dlq") as dlq_reader:
        letters = [r.event for r in drain(dlq_reader, 2)]
    assert [(d.source_topic, d.offset) for d in letters] == [(topics.node, 1), (topics.node, 3)]
    assert "node: Field required" in letters[0].reason and "interval: Field required" in letters[0].reason
    assert letters[1].raw_value() == b"\x00not json"
    assert "Invalid JSON" in letters[1].reason


def test_a_restarted_consumer_resumes_after_what_it_handed_out(kafka: KafkaSettings, group_id: str) -> None:
    topic = kafka.topics.node
    events = [s.NodeHeartbeat(ts=float(i), node="n1", interval=1.0) for i in range(6)]
    with EventProducer(kafka) as producer:
        for event in events[:3]:
            producer.send(topic, event, key="n1")
    with EventConsumer(kafka, [topic], group_id) as first:
        assert [r.event for r in drain(first, 3)] == events[:3]
        first.poll(0.1)  # asking past a batch marks it processed
    with EventProducer(kafka) as producer:
        for event in events[3:]:
            producer.send(topic, event, key="n1")
    with EventConsumer(kafka, [topic], group_id) as second:
        assert [r.event for r in drain(second, 3)] == events[3:]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payloads=st.lists(st.binary(max_size=200), min_size=1, max_size=5))
def test_arbitrary_bytes_through_the_broker_never_stop_the_consumer(
    kafka: KafkaSettings, payloads: list[bytes],
) -> None:
    import uuid

    topic = kafka.topics.gpu
    marker = s.GpuSample(ts=1.0, node=uuid.uuid4().hex, gpu=0)
    with EventProducer(kafka) as producer:
        for payload in payloads:
            producer.send(topic, payload, key="fuzz")
        producer.send(topic, marker, key="fuzz")
    seen: list[s.Event] = []
    deadline = time.monotonic() + 30
    with EventConsumer(kafka, [topic], f"fuzz-{uuid.uuid4().hex}") as consumer:
        while marker not in seen and time.monotonic() < deadline:
            seen += [r.event for r in consumer.poll(0.5)]
    assert marker in seen


def test_a_failed_delivery_is_raised_never_hidden(kafka: KafkaSettings) -> None:
    producer = EventProducer(kafka, config={"message.timeout.ms": 2000})
    producer.send("does-not-exist-and-cannot-be-created!", s.NodeHeartbeat(ts=1, node="n", interval=1))
    with pytest.raises(DeliveryError):
        producer.flush(timeout_s=10)


def test_an_unreachable_broker_fills_the_bounded_queue_and_says_so() -> None:
    settings = KafkaSettings(bootstrap="127.0.0.1:1")
    producer = EventProducer(settings, max_buffered=10)
    event = s.NodeHeartbeat(ts=1, node="n", interval=1)
    for _ in range(10):
        producer.send(settings.topics.node, event, block_s=0)
    with pytest.raises(KafkaError, match="queue full") as caught:
        producer.send(settings.topics.node, event, block_s=0.2)
    assert caught.value.retryable
    assert producer.pending() == 10
