"""The consumer's validation step: every message becomes a record or a dead letter, never an error."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

import trainmedic.schemas as s
from trainmedic.bus.message import Record, parse_message

TOPICS = s.Topics("t.")


def test_a_valid_value_becomes_a_record() -> None:
    value = s.encode(s.NodeHeartbeat(ts=1, node="n", interval=1))
    got = parse_message(TOPICS, TOPICS.node, 3, 7, b"n", value, now=50.0)
    assert got == Record(TOPICS.node, 3, 7, "n", s.NodeHeartbeat(ts=1, node="n", interval=1), value)


def test_an_invalid_value_becomes_a_dead_letter_with_its_origin() -> None:
    got = parse_message(TOPICS, TOPICS.gpu, 1, 42, b"n", b'{"type":"gpu_sample"}', now=50.0)
    assert isinstance(got, s.DeadLettered)
    assert (got.source_topic, got.partition, got.offset, got.key, got.ts) == (TOPICS.gpu, 1, 42, "n", 50.0)
    assert "ts: Field required" in got.reason
    assert got.raw_value() == b'{"type":"gpu_sample"}'


def test_a_topic_without_a_contract_is_dead_lettered() -> None:
    got = parse_message(TOPICS, "someone.elses", 0, 0, None, b"{}", now=1.0)
    assert isinstance(got, s.DeadLettered)
    assert "no contract" in got.reason


def test_a_key_that_is_not_utf8_is_dead_lettered() -> None:
    value = s.encode(s.NodeHeartbeat(ts=1, node="n", interval=1))
    got = parse_message(TOPICS, TOPICS.node, 0, 0, b"\xff", value, now=1.0)
    assert isinstance(got, s.DeadLettered)
    assert "key is not UTF-8" in got.reason


@given(value=st.none() | st.binary(max_size=300), key=st.none() | st.binary(max_size=20),
       suffix=st.sampled_from([spec.suffix for spec in s.SPECS] + ["unknown"]))
def test_arbitrary_bytes_never_raise_out_of_the_consumer(value, key, suffix) -> None:
    topic = TOPICS.prefix + suffix
    got = parse_message(TOPICS, topic, 0, 5, key, value, now=1.0)
    assert isinstance(got, Record | s.DeadLettered)
    if isinstance(got, s.DeadLettered):
        assert got.raw_value() == (value or b"")
        assert got.reason


@given(doc=st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
), kind=st.sampled_from(["gpu_sample", "node_heartbeat", "worker_step", "incident", "command", "ack"]))
def test_arbitrary_json_documents_never_raise(doc, kind) -> None:
    import json

    if isinstance(doc, dict):
        doc = {**doc, "type": kind}
    value = json.dumps(doc).encode()
    for spec in s.SPECS:
        got = parse_message(TOPICS, TOPICS.prefix + spec.suffix, 0, 0, None, value, now=1.0)
        assert isinstance(got, Record | s.DeadLettered)
