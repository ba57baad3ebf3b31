"""Pipeline: what both engines do with a message or a tick, without Kafka."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaError, Message

import trainmedic.schemas as s
from tests.unit.streams.test_checkpoint import arrivals
from tests.unit.streams.test_live_detector import until
from tests.unit.streams.test_scenarios import NAMES, SCENARIOS
from trainmedic.bus.message import RawMessage
from trainmedic.streams.core import Detector
from trainmedic.streams.live import LiveConfig, LiveDetector
from trainmedic.streams.pipeline import Pipeline
from trainmedic.streams.replay import replay

TOPICS = s.Topics("mem.")


def message(topic: str, partition: int, offset: int, key: bytes, value: bytes) -> RawMessage:
    return RawMessage(topic, partition, offset, -1, key, value)  # no timestamp: clocks unchecked


def pipeline() -> Pipeline:
    return Pipeline(TOPICS, LiveDetector(Detector(), LiveConfig(lateness_s=0.0)))


def test_a_recording_through_the_pipeline_opens_its_incident_keyed_by_job() -> None:
    lines = [line for line in (SCENARIOS / "gpu_lost_xid79.jsonl").read_bytes().splitlines() if line]
    run, out = pipeline(), []
    for offset, line in enumerate(sorted(lines, key=lambda line: json.loads(line)["ts"])):
        out += run.on_message(message(TOPICS.gpu, 0, offset, b"k", line), wall=json.loads(line)["ts"])
    out += run.on_tick(wall=1e12)
    incidents = [(o.key, s.decode(o.value, s.adapter("incidents")))
                 for o in out if o.topic == TOPICS.incidents]
    key, first = incidents[0]
    assert (first.category, first.severity, first.node, first.status) == (
        "gpu_lost", "SEV1", "node-01", "open")
    assert key == b"job-a"
    assert run.stats.incidents == len(incidents) and run.stats.dead_lettered == 0


def test_malformed_values_become_dead_letters_with_the_reason() -> None:
    run = pipeline()
    beat = s.encode(s.NodeHeartbeat(ts=1.0, node="n", interval=1.0))
    out = []
    bad = json.dumps({"type": "gpu_sample", "ts": 2}).encode()
    for offset, value in enumerate([b"{not json", beat, bad]):
        out += run.on_message(message(TOPICS.gpu, 3, offset, b"n", value), wall=1.0)
    letters = [s.decode(o.value, s.adapter("dlq")) for o in out if o.topic == TOPICS.dlq]
    assert [(letter.partition, letter.offset) for letter in letters] == [(3, 0), (3, 2)]
    assert "Invalid JSON" in letters[0].reason and "node: Field required" in letters[1].reason
    assert all(o.key == TOPICS.gpu.encode() for o in out)
    assert run.stats.events == 1 and run.stats.dead_lettered == 2


@pytest.mark.parametrize("name", NAMES)
def test_messages_read_in_batches_decide_what_replay_decides(name: str) -> None:
    """As the consumer engine reads them: up to 64 messages at a time, one wall time for them all,
    partitions interleaved in runs, a tick every 0.25 s, an invalid message among them."""
    items = arrivals(name)
    run = Pipeline(TOPICS, LiveDetector(Detector(), LiveConfig(lateness_s=0.5, max_skew_s=1e10)))
    offsets: dict[tuple, int] = {}
    out, batch, ticked = [], [], items[0][0]
    for n, (wall, source, event) in enumerate(items):
        offset = offsets[source] = offsets.get(source, -1) + 1
        batch.append(RawMessage(*source, offset, int(wall * 1000), event.node.encode(), s.encode(event)))
        if n == len(items) // 2:
            batch.append(RawMessage(*source, offset + 1, -1, None, b"{not json"))
            offsets[source] += 1
        if len(batch) >= 64 or n + 1 == len(items) or items[n + 1][0] - ticked >= 0.25:
            out += run.on_messages(batch, wall)
            batch = []
        if wall - ticked >= 0.25:
            out += run.on_tick(wall)
            ticked = wall
    for tick in range(1, 11):
        out += run.on_tick(items[-1][0] + tick / 2)
    found = [s.decode(o.value, s.adapter("incidents")) for o in out if o.topic == TOPICS.incidents]
    newest: dict[tuple, float] = {}
    for _, source, event in items:
        newest[source] = max(newest.get(source, event.ts), event.ts)
    assert {source: max_ts for source, (max_ts, _) in run.live.sources(0.0).items()} == newest
    last_ts = max(newest.values())
    assert until(found, last_ts) == until(replay([event for _, _, event in items]), last_ts) and found
    assert run.stats.dead_lettered == 1


def odd_messages(now: float) -> list[RawMessage]:
    """One of each message `on_fetch` cannot take on its fast path, among common ones."""
    def beat(ts: float, node: str = "n") -> bytes:
        return s.encode(s.NodeHeartbeat(ts=ts, node=node, interval=1.0))

    stamp = int(now * 1000)
    values = [
        (b"n", beat(now)),
        (b"n", b"{not json"),
        (b"n", None),  # a tombstone
        (b"n", beat(now + 3600.0)),  # its clock an hour ahead
        (b"n", s.encode(s.GpuSample(ts=now, node="n", gpu=0, uuid="GPU-\u00e9"))),  # non-ASCII, valid
        (b"\xff", beat(now)),  # a key that is not UTF-8
        (None, beat(now)),
        (b"n\xc3\xa9", beat(now + 0.5, "m")),  # a UTF-8 key, not ASCII
        (b"n", json.dumps({"type": "gpu_sample", "ts": now}).encode()),
    ]
    return [RawMessage(TOPICS.node, 0, offset, stamp, key, value)
            for offset, (key, value) in enumerate(values)] + [
        RawMessage(TOPICS.node, 1, 0, stamp, b"n", b"{not json")]  # a partition with nothing valid


@pytest.mark.parametrize("name", NAMES)
def test_a_fetch_as_confluent_kafka_gives_it_is_taken_as_its_messages_are(name: str) -> None:
    """`on_fetch` (the consumer engine, in one pass) and `on_messages` (RawMessages) give the same
    output, stats, held origins and offsets, over a scenario with odd messages and a consumer error
    among its fetches."""
    now = arrivals(name)[0][0]
    fetches, offsets = [], {}
    for n, (wall, source, event) in enumerate(arrivals(name)):
        offset = offsets[source] = offsets.get(source, -1) + 1
        fetches.append((wall, [RawMessage(*source, offset, int(wall * 1000), event.node.encode(),
                                          s.encode(event))]))
        if n % 7 == 0 and len(fetches) > 1:  # fetches of several partitions' runs
            fetches[-2][1].extend(fetches.pop()[1])
    fetches.insert(len(fetches) // 2, (fetches[len(fetches) // 2][0], odd_messages(now)))
    error = KafkaError(KafkaError._TRANSPORT, "the broker went away")
    runs, errors = {}, []
    for way in ("messages", "fetch"):
        run, out, read = pipeline(), [], {}
        for wall, batch in fetches:
            if way == "messages":
                out += run.on_messages(batch, wall)
                read.update({m.where: m.offset + 1 for m in batch})
            else:
                got = [Message(topic=m.topic, partition=m.partition, offset=m.offset, key=m.key,
                               value=m.value, timestamp=(TIMESTAMP_CREATE_TIME, m.timestamp_ms))
                       for m in batch]
                got.insert(len(got) // 2, Message(topic=batch[0].topic, partition=batch[0].partition,
                                                  error=error))
                out += run.on_fetch(got, wall, read, errors.append)
            out += run.on_tick(wall)
        held = [(h.event, h.origin) for h in run.live.held()]
        out += run.on_tick(fetches[-1][0] + 60.0)
        runs[way] = (out, run.stats, read, held, run.live.sources(0.0))
    assert runs["fetch"] == runs["messages"]
    out, stats, read, held, _ = runs["fetch"]
    assert errors == [error] * len(fetches)
    assert read == {**{tp: n + 1 for tp, n in offsets.items()}, (TOPICS.node, 0): 9, (TOPICS.node, 1): 1}
    assert stats.dead_lettered == 6 and any(o.topic == TOPICS.incidents for o in out) and held


def test_an_event_the_core_fails_on_is_dead_lettered_and_the_others_are_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = pipeline()
    beat = s.encode(s.NodeHeartbeat(ts=1.0, node="n", interval=1.0))
    apply = run.live.detector._apply

    def broken(event):
        if event.node == "bad":
            raise RuntimeError("a bug")
        apply(event)

    monkeypatch.setattr(run.live.detector, "_apply", broken)
    bad = s.encode(s.NodeHeartbeat(ts=2.0, node="bad", interval=1.0))
    out = run.on_message(message(TOPICS.node, 0, 7, b"n", beat), wall=1.0)
    out += run.on_message(message(TOPICS.node, 0, 8, b"bad", bad), wall=2.0)
    assert [o.topic for o in out] == [TOPICS.dlq]
    letter = s.decode(out[0].value, s.adapter("dlq"))
    assert "detector error (RuntimeError: a bug" in letter.reason
    assert (letter.source_topic, letter.partition, letter.offset, letter.key) == (TOPICS.node, 0, 8, "bad")
    assert s.decode(letter.raw_value(), s.adapter("telemetry.node")).node == "bad"
    assert run.on_message(message(TOPICS.node, 0, 9, b"n", beat), wall=3.0) == []
    assert run.stats.dead_lettered == 1 and set(run.live.detector.state.nodes) == {"n"}


def test_a_held_event_keeps_the_message_it_came_from() -> None:
    run = Pipeline(TOPICS, LiveDetector(Detector(), LiveConfig(lateness_s=10.0)))
    sent = message(TOPICS.node, 2, 41, b"n", s.encode(s.NodeHeartbeat(ts=1.0, node="n", interval=1.0)))
    assert run.on_message(sent, wall=1.0) == []
    [held] = run.live.held()
    assert held.origin is sent


def test_an_event_fed_without_its_message_is_dead_lettered_re_encoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = pipeline()

    def broken(event):
        raise RuntimeError("a bug")

    monkeypatch.setattr(run.live.detector, "_apply", broken)
    beat = s.NodeHeartbeat(ts=1.0, node="n", interval=1.0)
    run.live.feed(beat, (TOPICS.node, 0), wall=1.0)
    [out] = run.on_tick(wall=2.0)
    letter = s.decode(out.value, s.adapter("dlq"))
    assert (letter.source_topic, letter.partition, letter.offset, letter.key) == ("", -1, -1, None)
    assert s.decode(letter.raw_value(), s.adapter("telemetry.node")) == beat


