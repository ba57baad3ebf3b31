"""`trainmedic record` against a real broker: the file holds exactly the produced events of the
chosen stretch, and `trainmedic replay` of it gives the incidents of the original events."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

import trainmedic.schemas as s
from tests.integration.producer_time import producer_stamped
from tests.unit.streams.test_scenarios import load
from trainmedic.bus.reader import NOW, TopicReader
from trainmedic.bus.settings import KafkaSettings
from trainmedic.cli import main
from trainmedic.schemas import encode
from trainmedic.streams.replay import replay

pytestmark = pytest.mark.kafka

RECORDING = "node_lost_gloo"
HOUR = 3600.0


def topic_and_key(settings: KafkaSettings, event: s.Event) -> tuple[str, str]:
    topics = settings.topics
    if isinstance(event, s.WorkerEvent):
        return topics.worker, event.job
    return (topics.gpu if isinstance(event, s.GpuSample) else topics.node), event.node


def malformed(settings: KafkaSettings) -> list[tuple[str, str, bytes]]:
    topics = settings.topics
    return [
        (topics.gpu, "node-x", b'{"type": "gpu_sample", "ts": 1.0, "node": "node-x"}'),  # no gpu
        (topics.node, "node-x", b"not json"),
        (topics.worker, "job-x", b"\xff\xfe"),
    ]


def produce(settings: KafkaSettings, values: list[tuple[str, str, bytes]],
            at: float | None = None) -> list[tuple[str, int, int]]:
    """Sends the values, stamped `at` (Unix s; default: now); returns where each landed."""
    producer = Producer(settings.client_config(**{"acks": "all"}))
    landed: dict[int, tuple[str, int, int]] = {}
    for i, (topic, key, value) in enumerate(values):
        def delivered(err, msg, i=i):
            if err is None:
                landed[i] = (msg.topic(), msg.partition(), msg.offset())
        stamp = {} if at is None else {"timestamp": int(at * 1000)}
        producer.produce(topic, value, key, on_delivery=delivered, **stamp)
        producer.poll(0)
    producer.flush(30)
    if len(landed) != len(values):
        raise RuntimeError(f"only {len(landed)} of {len(values)} messages were delivered")
    return [landed[i] for i in range(len(values))]


def as_values(settings: KafkaSettings, events: list) -> list[tuple[str, str, bytes]]:
    return [(*topic_and_key(settings, e), encode(e)) for e in events]


def record(settings: KafkaSettings, monkeypatch, *args: str) -> int:
    monkeypatch.setenv("TRAINMEDIC_TOPIC_PREFIX", settings.topic_prefix)
    return main(["record", "--bootstrap", settings.bootstrap, "--progress-s", "1", *args])


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


def test_records_to_now_exactly_what_was_produced_and_replays_alike(
    kafka: KafkaSettings, monkeypatch, tmp_path: Path, capsys,
) -> None:
    events = load(RECORDING)[0]
    values, bad = as_values(kafka, events), malformed(kafka)
    topic, key, last = values[-1]
    values[-1] = (topic, key, json.dumps(json.loads(last), indent=2).encode())  # spans lines
    landed = produce(kafka, values + bad)
    out = tmp_path / "rec.jsonl"

    assert record(kafka, monkeypatch, "--from-offset", "earliest", "--output", str(out)) == 0

    lines = out.read_bytes().splitlines()
    compact = json.dumps(json.loads(last), separators=(",", ":")).encode()
    assert sorted(lines) == sorted([encode(e) for e in events[:-1]] + [compact])
    err = capsys.readouterr().err
    skipped = [line for line in err.splitlines() if line.startswith("skipped ")]
    wanted = {f"skipped {t}[{p}]@{o}" for t, p, o in landed[len(events):len(events) + len(bad)]}
    assert {line.split(":")[0] for line in skipped} == wanted
    assert all(len(line.split(": ", 1)[1]) > 5 for line in skipped)  # a reason each
    gpu = sum(isinstance(e, s.GpuSample) for e in events)
    assert f"{kafka.topics.gpu} {gpu:,}" in err.splitlines()[-1]
    assert "skipped 3 invalid" in err.splitlines()[-1]

    groups = AdminClient({"bootstrap.servers": kafka.bootstrap}).list_consumer_groups().result(30)
    assert not [g.group_id for g in groups.valid if g.group_id.startswith("trainmedic-record-")]

    incidents = tmp_path / "incidents.jsonl"
    assert main(["replay", str(out), "--output", str(incidents)]) == 0
    assert incidents.read_bytes().splitlines() == [encode(i) for i in replay(events)]
    assert any(i.category == "node_lost" for i in replay(events))


def test_to_now_stops_at_the_ends_of_when_it_started(kafka: KafkaSettings) -> None:
    events = load(RECORDING)[0]
    before, after = events[:500], events[500:700]
    produce(kafka, as_values(kafka, before))
    topics = kafka.topics
    with TopicReader(kafka, [topics.gpu, topics.node, topics.worker], end=NOW) as reader:
        reader.open()
        produce(kafka, as_values(kafka, after))
        got = [msg.value for batch in reader.batches() for msg in batch]
    assert sorted(got) == sorted(encode(e) for e in before)


def test_time_window_is_when_messages_were_produced_not_event_ts(
    kafka: KafkaSettings, monkeypatch, tmp_path: Path, capsys,
) -> None:
    """Event `ts` in the scenario are from 2023; the window selects by producer timestamp."""
    producer_stamped(kafka)
    events = load(RECORDING)[0]
    now = time.time()
    early = [s.NodeHeartbeat(ts=now, node="node-early", interval=1.0)]
    late = [s.NodeHeartbeat(ts=1.0, node="node-late", interval=1.0)]
    produce(kafka, as_values(kafka, early), at=now - 3 * HOUR)
    produce(kafka, as_values(kafka, events), at=now - 2 * HOUR)
    produce(kafka, as_values(kafka, late), at=now - 1 * HOUR)
    out = tmp_path / "window.jsonl"

    def recorded(*args: str) -> list[bytes]:
        assert record(kafka, monkeypatch, *args, "--output", str(out)) == 0
        return sorted(out.read_bytes().splitlines())

    middle = sorted(encode(e) for e in events)
    assert recorded("--from-time", iso(now - 2.5 * HOUR), "--until", iso(now - 1.5 * HOUR)) == middle
    assert recorded("--from-time", "150m", "--duration", "1h") == middle
    assert recorded("--from-time", "100m") == [encode(e) for e in late]
    assert recorded("--from-offset", "earliest", "--until", iso(now - 2.5 * HOUR)) == [
        encode(e) for e in early]

    incidents = tmp_path / "incidents.jsonl"
    recorded("--from-time", "150m", "--duration", "1h")
    assert main(["replay", str(out), "--output", str(incidents)]) == 0
    assert incidents.read_bytes().splitlines() == [encode(i) for i in replay(events)]


def test_a_future_end_records_live_until_then(kafka: KafkaSettings, monkeypatch, tmp_path: Path) -> None:
    producer_stamped(kafka)
    now_events = [s.NodeHeartbeat(ts=1.0 + i, node=f"node-{i}", interval=1.0) for i in range(20)]
    produce(kafka, as_values(kafka, now_events))
    produce(kafka, as_values(kafka, [s.NodeHeartbeat(ts=1.0, node="node-future", interval=1.0)]),
            at=time.time() + HOUR)
    out = tmp_path / "live.jsonl"
    assert record(kafka, monkeypatch, "--from-offset", "earliest", "--duration", "1s",
                  "--output", str(out)) == 0
    assert sorted(out.read_bytes().splitlines()) == sorted(encode(e) for e in now_events)


def test_start_offsets_apply_to_every_partition(kafka: KafkaSettings, monkeypatch, capsysbinary) -> None:
    events = load(RECORDING)[0][:300]
    landed = produce(kafka, as_values(kafka, events))
    assert record(kafka, monkeypatch, "--from-offset", "1") == 0
    got = capsysbinary.readouterr().out.splitlines()
    assert sorted(got) == sorted(encode(e) for e, (_, _, offset) in zip(events, landed, strict=True)
                                 if offset >= 1)
    assert len(got) < len(events)
    assert record(kafka, monkeypatch, "--from-offset", "latest") == 0
    assert capsysbinary.readouterr().out == b""

