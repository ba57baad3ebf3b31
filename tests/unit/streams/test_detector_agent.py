"""The Faust agent in memory (`test_context`): telemetry in, incidents and dead letters out."""

from __future__ import annotations

import asyncio
import json

import schemas as s
from bus.settings import KafkaSettings
from streams.app import build_app
from streams.live import LiveConfig
from tests.unit.streams.test_scenarios import SCENARIOS

SETTINGS = KafkaSettings(bootstrap="127.0.0.1:1", topic_prefix="mem.")


def run_agent(lines: list[bytes]) -> list[tuple[str, bytes, bytes]]:
    sent: list[tuple[str, bytes, bytes]] = []

    async def sink(topic: str, key: bytes, value: bytes) -> None:
        sent.append((topic, key, value))

    detector = build_app(SETTINGS, app_id="agent-test", live_config=LiveConfig(lateness_s=0.0), sink=sink)

    async def go() -> None:
        async with detector.process.test_context() as agent:
            for line in lines:
                await agent.put(key=b"k", value=line)

    asyncio.run(go())
    return sent


def test_a_recording_put_through_the_agent_opens_its_incident() -> None:
    lines = [line for line in (SCENARIOS / "gpu_lost_xid79.jsonl").read_bytes().splitlines() if line]
    # All of it arrives through one channel here, so it comes in event-time order.
    sent = run_agent(sorted(lines, key=lambda line: json.loads(line)["ts"]))
    incidents = [s.decode(v, s.adapter("incidents")) for t, _, v in sent if t == SETTINGS.topics.incidents]
    assert [(i.category, i.severity, i.node, i.status) for i in incidents][:1] == [
        ("gpu_lost", "SEV1", "node-01", "open")]
    keys = [key for t, key, _ in sent if t == SETTINGS.topics.incidents]
    assert keys[0] == b"job-a"  # incidents are keyed by job, so a job's story stays in order


def test_malformed_values_go_to_the_dlq_and_the_agent_keeps_going() -> None:
    beat = s.encode(s.NodeHeartbeat(ts=1.0, node="n", interval=1.0))
    sent = run_agent([b"{not json", beat, json.dumps({"type": "gpu_sample", "ts": 2}).encode(), beat])
    letters = [s.decode(v, s.adapter("dlq")) for t, _, v in sent if t == SETTINGS.topics.dlq]
    assert len(letters) == 2
    assert "Invalid JSON" in letters[0].reason
    assert "node: Field required" in letters[1].reason
    assert letters[1].raw_value() == b'{"type": "gpu_sample", "ts": 2}'
