"""Dead letters are capped, whatever they are about, and a dead letter the dlq refuses never stops
the service that writes it (docs/security.md, "Poison records")."""

from __future__ import annotations

import base64
import hashlib

import pytest
from confluent_kafka import KafkaError as RdKafkaError
from confluent_kafka import KafkaException
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

import trainmedic.schemas as s
from trainmedic.bus.message import Record, parse_message
from trainmedic.bus.producer import DLQ_ATTEMPTS, EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import DeliveryError
from trainmedic.schemas.dlq import KEY_KEPT_BYTES, MAX_LETTER_BYTES, REASON_KEPT_CHARS, VALUE_KEPT_BYTES

TOPICS = s.Topics()
LIBRDKAFKA_MESSAGE_MAX_BYTES = 1_000_000  # librdkafka's default message.max.bytes (the broker's: 1,048,588)


def letter(value: bytes | None, *, reason: str = "bad", key: bytes | None = b"k",
           topic: str = "t") -> s.DeadLettered:
    return s.DeadLettered.of(ts=1.0, reason=reason, topic=topic, partition=0, offset=7, key=key, value=value)


def size(dead: s.DeadLettered) -> int:
    return len(s.encode(dead))


def test_the_cap_leaves_room_under_the_producers_and_the_brokers_message_limit() -> None:
    assert MAX_LETTER_BYTES * 3 < LIBRDKAFKA_MESSAGE_MAX_BYTES


def test_an_oversized_value_is_cut_with_its_size_and_hash() -> None:
    value = b'{"type":"node_heartbeat","ts":1,"node":"' + b"x" * 430_000 + b'","interval":1}'
    dead = letter(value)
    assert size(dead) <= MAX_LETTER_BYTES < len(value) * 2
    assert dead.truncated and dead.value_size == len(value)
    assert dead.value_sha256 == hashlib.sha256(value).hexdigest()
    kept = value[:VALUE_KEPT_BYTES]
    assert dead.raw_value() == kept and dead.value_text == kept.decode()


def test_a_small_value_is_kept_whole() -> None:
    dead = letter(b'{"type":"x"}')
    assert not dead.truncated and dead.raw_value() == b'{"type":"x"}' and dead.value_size == 12


def test_a_binary_value_is_kept_as_base64_only() -> None:
    value = bytes(range(256)) * 4_000
    dead = letter(value)
    assert dead.value_text is None and dead.truncated and dead.raw_value() == value[:VALUE_KEPT_BYTES]
    assert size(dead) <= MAX_LETTER_BYTES


def test_a_character_cut_in_two_ends_the_text_before_it() -> None:
    value = b"a" * (VALUE_KEPT_BYTES - 1) + "é".encode() * 10  # é is 2 bytes: the cut falls inside one
    dead = letter(value)
    assert dead.value_text == "a" * (VALUE_KEPT_BYTES - 1) and len(dead.raw_value()) == VALUE_KEPT_BYTES


def test_the_worst_case_in_every_field_stays_under_the_cap() -> None:
    """Every kept part at its most bytes of JSON: control characters (6 bytes each, `\\u0001`),
    lone surrogates in a reason, bytes that are not UTF-8 in a key."""
    dead = s.DeadLettered.of(ts=s.bounds.MAX_TS, reason="\ud800\x01" * 1_000_000, topic="\x01" * 10_000,
                             partition=2**31, offset=2**63 - 1, key=b"\x01\xff" * 1_000_000,
                             value=b"\x01" * 2_000_000)
    assert size(dead) <= MAX_LETTER_BYTES
    assert dead.reason.endswith("(2000000 characters in all)") and dead.key.endswith("(2000000 bytes in all)")
    assert len(dead.reason) <= REASON_KEPT_CHARS * 7 + 40 and dead.value_size == 2_000_000


def test_a_validation_error_that_quotes_a_huge_input_is_cut() -> None:
    value = b'{"type":"node_heartbeat","ts":1,"node":"n","interval":"' + b"9" * 900_000 + b'"}'
    dead = parse_message(TOPICS, TOPICS.node, 0, 3, b"n", value, 1.0)
    assert isinstance(dead, s.DeadLettered) and size(dead) <= MAX_LETTER_BYTES and dead.reason


def test_deeply_nested_json_is_a_capped_dead_letter() -> None:
    nested = b"[" * 300_000 + b"]" * 300_000
    value = b'{"type":"node_heartbeat","ts":1,"node":"n","interval":1,"links":' + nested + b"}"
    dead = parse_message(TOPICS, TOPICS.node, 0, 3, b"n", value, 1.0)
    assert isinstance(dead, s.DeadLettered) and "recursion" in dead.reason
    assert dead.truncated and size(dead) <= MAX_LETTER_BYTES


def test_a_huge_key_is_cut() -> None:
    dead = letter(b"{}", key=b"k" * 900_000)
    assert dead.key.startswith("k" * KEY_KEPT_BYTES) and size(dead) <= MAX_LETTER_BYTES


@settings(max_examples=60, deadline=None)
@given(value=st.binary(max_size=70_000), reason=st.text(max_size=6_000),
       key=st.none() | st.binary(max_size=3_000))
def test_any_letter_fits(value: bytes, reason: str, key: bytes | None) -> None:
    dead = letter(value, reason=reason, key=key)
    assert size(dead) <= MAX_LETTER_BYTES
    assert dead.value_size == len(value) and dead.raw_value() == value[:VALUE_KEPT_BYTES]


def test_dlq_readers_take_a_cut_letter_and_one_written_before_the_cap() -> None:
    cut = letter(b"z" * 100_000)
    read = parse_message(TOPICS, TOPICS.dlq, 0, 0, b"t", s.encode(cut), 2.0)
    assert isinstance(read, Record) and read.event == cut
    assert read.event.raw_value() == b"z" * VALUE_KEPT_BYTES and read.event.truncated
    old = (b'{"type":"dead_letter","ts":1,"reason":"r","source_topic":"t","partition":0,"offset":1,'
           b'"value_b64":"' + base64.b64encode(b"whole") + b'"}')
    read = parse_message(TOPICS, TOPICS.dlq, 0, 1, b"t", old, 2.0)
    assert isinstance(read, Record) and read.event.raw_value() == b"whole" and not read.event.truncated


class Sent:
    """What librdkafka passes to a delivery callback, as far as EventProducer reads it."""

    @staticmethod
    def topic() -> str:
        return TOPICS.dlq


class FakeClient:
    """A librdkafka producer that refuses the first `refusals` messages with `code`, either when
    queued (`at_produce`) or on delivery, and keeps what it took."""

    def __init__(self, code: int, refusals: int, *, at_produce: bool) -> None:
        self.code, self.refusals, self.at_produce = code, refusals, at_produce
        self.taken: list[bytes] = []
        self.tried: list[bytes] = []
        self.callbacks: list = []
        self.polling = False

    def produce(self, topic, value, key, on_delivery, headers=None) -> None:
        self.tried.append(value)
        refused = len(self.tried) <= self.refusals
        if refused and self.at_produce:
            raise KafkaException(RdKafkaError(self.code))
        if not refused:
            self.taken.append(value)
        self.callbacks.append((on_delivery, RdKafkaError(self.code) if refused else None))

    def poll(self, timeout: float) -> int:
        assert not self.polling, "a poll inside a delivery callback: confluent_kafka aborts the process"
        self.polling = True
        try:
            while self.callbacks:
                on_delivery, err = self.callbacks.pop(0)
                on_delivery(err, Sent())
        finally:
            self.polling = False
        return 0

    def flush(self, timeout: float) -> int:
        self.poll(0)
        return 0

    def __len__(self) -> int:
        return 0


def producer(client: FakeClient) -> EventProducer:
    out = EventProducer(KafkaSettings(bootstrap="127.0.0.1:1"))
    out._client = client  # the client is created on first use: this one instead
    return out


def failures(outcome: str) -> float:
    return REGISTRY.get_sample_value("trainmedic_dead_letter_failures_total", {"outcome": outcome}) or 0.0


@pytest.mark.parametrize("at_produce", [True, False], ids=["refused-when-queued", "refused-on-delivery"])
def test_a_letter_refused_as_too_large_is_sent_again_without_its_value(at_produce: bool) -> None:
    client = FakeClient(RdKafkaError.MSG_SIZE_TOO_LARGE, refusals=1, at_produce=at_produce)
    retried = failures("retried")
    dead = letter(b"x" * 100_000)
    out = producer(client)
    out.send(TOPICS.dlq, dead, key="t")
    out.flush()
    [taken] = client.taken
    again = s.DeadLettered.model_validate_json(taken)
    assert again.raw_value() == b"" and again.truncated and again.value_sha256 == dead.value_sha256
    assert again.value_size == 100_000 and failures("retried") == retried + 1


@pytest.mark.parametrize("at_produce", [True, False], ids=["refused-when-queued", "refused-on-delivery"])
def test_a_letter_never_taken_is_counted_and_never_raised(at_produce: bool) -> None:
    client = FakeClient(RdKafkaError.TOPIC_AUTHORIZATION_FAILED, refusals=DLQ_ATTEMPTS, at_produce=at_produce)
    lost = failures("lost")
    out = producer(client)
    out.send(TOPICS.dlq, letter(b"x"), key="t")
    out.flush()
    out.send(TOPICS.incidents, b"{}", key="j")  # what comes after it is not refused for it
    out.flush()
    assert client.taken == [b"{}"] and len(client.tried) == DLQ_ATTEMPTS + 1 and failures("lost") == lost + 1


def test_a_refused_delivery_to_another_topic_is_still_raised() -> None:
    out = producer(FakeClient(RdKafkaError.TOPIC_AUTHORIZATION_FAILED, refusals=1, at_produce=False))
    out.send(TOPICS.incidents, b"{}", key="j")
    with pytest.raises(DeliveryError):
        out.flush()
