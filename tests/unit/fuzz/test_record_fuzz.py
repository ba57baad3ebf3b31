"""`trainmedic record` under 100,000 hostile values: none raises, each is reported and skipped, and the
file holds exactly the good values, in order."""

from __future__ import annotations

import io
import json
import random

from hypothesis import given

from tests.unit.fuzz.hostile import EXAMPLES, FUZZ, PER_EXAMPLE, Tally, atoms, batch, interleave, seeds
from tests.unit.streams.test_pipeline import TOPICS
from tests.unit.streams.test_scenarios import SCENARIOS
from trainmedic.bus.message import RawMessage
from trainmedic.streams.record import Counts, copy

LINES = [line for line in (SCENARIOS / "gpu_lost_xid79.jsonl").read_bytes().splitlines() if line]
TEMPLATES = [json.loads(line) for line in LINES]
TOPIC = {"gpu_sample": TOPICS.gpu, "node_heartbeat": TOPICS.node}
TALLY = Tally()


class Backlog:
    """What a TopicReader hands `copy`: batches of messages as stored, then the end."""

    def __init__(self, items: list[tuple[bool, bytes | None]]) -> None:
        self.messages = [RawMessage(topic(value) if is_good else TOPICS.gpu, 0, offset, 0, b"k", value)
                         for offset, (is_good, value) in enumerate(items)]

    def batches(self):
        for start in range(0, len(self.messages), 500):
            yield self.messages[start:start + 500]

    def progress(self) -> str:
        return "1/1 partitions done"


def topic(value: bytes) -> str:
    return TOPIC.get(json.loads(value)["type"], TOPICS.worker)


@FUZZ
@given(seed=seeds, pool=atoms)
def test_the_recording_holds_the_good_values_only(seed: int, pool: list) -> None:
    rng = random.Random(seed)
    bad = batch(rng, TEMPLATES, pool)
    out, errors = io.BytesIO(), io.StringIO()
    counts = Counts(dict.fromkeys([TOPICS.gpu, TOPICS.node, TOPICS.worker], 0))
    copy(Backlog(interleave(rng, LINES, bad)), TOPICS, counts, out, errors, 3600.0)
    assert out.getvalue() == b"".join(line + b"\n" for line in LINES)
    assert counts.skipped == len(bad) == errors.getvalue().count("skipped ") and counts.total == len(LINES)
    TALLY.thrown += len(bad)


def test_the_recorder_took_100k_hostile_values() -> None:
    if not TALLY.thrown:
        test_the_recording_holds_the_good_values_only()
    print(f"recorder: {TALLY.thrown:,} hostile values, none raised")
    assert TALLY.thrown >= EXAMPLES * PER_EXAMPLE >= 100_000
