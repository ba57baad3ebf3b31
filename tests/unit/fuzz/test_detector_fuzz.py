"""The detector's `Pipeline.on_message` under 100,000 hostile values: none raises, each becomes one
dead letter, and the incidents are those of the recording alone."""

from __future__ import annotations

import json
import random

from hypothesis import given

from tests.unit.fuzz.hostile import EXAMPLES, FUZZ, PER_EXAMPLE, Tally, atoms, batch, interleave, seeds
from tests.unit.streams.test_pipeline import TOPICS, pipeline
from tests.unit.streams.test_scenarios import SCENARIOS
from trainmedic.bus.message import RawMessage
from trainmedic.schemas import decode
from trainmedic.schemas.topics import adapter

LINES = sorted((line for line in (SCENARIOS / "gpu_lost_xid79.jsonl").read_bytes().splitlines() if line),
               key=lambda line: json.loads(line)["ts"])
TEMPLATES = [json.loads(line) for line in LINES]
TOPIC = {"gpu_sample": TOPICS.gpu, "node_heartbeat": TOPICS.node}


def run(items: list[tuple[bool, bytes | None]]) -> tuple[list[bytes], int]:
    detector, incidents, letters, wall = pipeline(), [], 0, 0.0
    for offset, (is_good, value) in enumerate(items):
        topic = TOPICS.worker
        if is_good:
            wall = json.loads(value)["ts"]
            topic = TOPIC.get(json.loads(value)["type"], TOPICS.worker)
        message = RawMessage(topic, 0, offset, int(wall * 1000), b"k", value)  # stamped when it happened
        for out in detector.on_message(message, wall):
            if out.topic == TOPICS.dlq:
                assert not is_good
                assert decode(out.value, adapter("dlq")).raw_value() == (value or b"")
                letters += 1
            else:
                incidents.append(out.value)
    return incidents + [o.value for o in detector.on_tick(wall + 60.0)], letters


CLEAN, _ = run([(True, line) for line in LINES])
TALLY = Tally()


@FUZZ
@given(seed=seeds, pool=atoms)
def test_hostile_telemetry_is_dead_lettered_and_the_incidents_stay(seed: int, pool: list) -> None:
    rng = random.Random(seed)
    bad = batch(rng, TEMPLATES, pool)
    incidents, letters = run(interleave(rng, LINES, bad))
    assert letters == len(bad)
    assert incidents == CLEAN and CLEAN
    TALLY.thrown += len(bad)


def test_the_detector_took_100k_hostile_values() -> None:
    if not TALLY.thrown:
        test_hostile_telemetry_is_dead_lettered_and_the_incidents_stay()
    print(f"detector: {TALLY.thrown:,} hostile values, none raised")
    assert TALLY.thrown >= EXAMPLES * PER_EXAMPLE >= 100_000
