"""The coordinator under 100,000 hostile records: none raises, each is dead-lettered or refused, and the
state is the one the good records alone give."""

from __future__ import annotations

import json
import random

from hypothesis import given

from tests.unit.coordinator.world import CONFIG, Recorder, incident
from tests.unit.fuzz.hostile import EXAMPLES, FUZZ, PER_EXAMPLE, Tally, atoms, batch, interleave, seeds
from trainmedic.bus.message import parse_message
from trainmedic.recovery.coordinator.core import ClusterState
from trainmedic.recovery.coordinator.intake import receive
from trainmedic.schemas import DeadLettered, NodeCordoned, Topics, encode

TOPICS = Topics("f.")


def recorded() -> list[tuple[str, bytes, float]]:
    """A job started, a spare cordoned, a SEV3 retried, a SEV2 restarted, a SEV1 re-planned:
    (topic, value, ts)."""
    rec = Recorder()
    rec.started(now=1.0)
    rec.feed(NodeCordoned(ts=5.0, node="n6", reason="bios"), now=5.0)
    rec.ack(rec.feed(incident("net-1", "SEV3", node="n1", ts=20.0), now=20.0), "done", now=21.0)
    rec.ack(rec.feed(incident("hang-2", "SEV2", node="n2", ts=30.0), now=30.0), "done", now=31.0)
    rec.feed(incident("xid-3", "SEV1", node="n3", ts=60.0), now=60.0)
    return [(TOPICS.name(topic), encode(e), e.ts) for (topic, _), e in rec.placed()]


GOOD = recorded()
TEMPLATES = [json.loads(value) for _, value, _ in GOOD]
START = next(json.loads(v) for _, v, _ in GOOD if b'"recovery_planned"' in v)
RIVAL = json.dumps({**START, "plan_id": "another-start", "generation": 10**6}).encode()  # valid; cannot apply
# Valid records that break the coordinator's bounds (job_bounds.py) or name a node outside the cluster.
JOB = next(json.loads(v) for _, v, _ in GOOD if b'"job_submitted"' in v)
FORGED = [
    (TOPICS.jobs, json.dumps({**JOB, "job": {**JOB["job"], **spec}}).encode()) for spec in (
        {"id": "evil", "nodes": ["n4", "n9"]},
        {"id": "heavy", "weight": 1e6},
        {"id": "fast", "throughput": {"3": 1e25}, "nodes": ["n4", "n5", "n6"]},
    )
] + [(TOPICS.recovery, json.dumps({**START, "plan_id": "away", "nodes": ["n1", "n2", "ghost"]}).encode())]


def run(items: list[tuple[bool, tuple[str, bytes | None, float]]]) -> tuple[ClusterState, int]:
    state, rejected = ClusterState.initial(CONFIG), 0
    for offset, (is_good, (topic, value, now)) in enumerate(items):
        parsed = parse_message(TOPICS, topic, 0, offset, b"k", value, now=now)
        answer = parsed.reason if isinstance(parsed, DeadLettered) else receive(state, parsed, now)
        if isinstance(answer, str):
            assert not is_good, answer
            rejected += 1
        else:
            assert is_good, value
    return state, rejected


CLEAN, _ = run([(True, item) for item in GOOD])
TALLY = Tally()


@FUZZ
@given(seed=seeds, pool=atoms)
def test_hostile_records_are_refused_and_the_good_ones_still_fold(seed: int, pool: list) -> None:
    rng = random.Random(seed)
    topics = [TOPICS.jobs, TOPICS.incidents, TOPICS.recovery, TOPICS.commands, TOPICS.acks, TOPICS.nodes]
    bad = [(rng.choice(topics), value, 100.0) for value in batch(rng, TEMPLATES, pool)]
    forged = [(topic, value, 100.0) for topic, value in FORGED]
    items = [*interleave(rng, GOOD, bad + forged), *[(False, (TOPICS.recovery, RIVAL, 100.0))] * 3]
    state, rejected = run(items)
    assert rejected == len(bad) + len(forged) + 3
    assert state == CLEAN
    TALLY.thrown += len(bad) + 3


def test_the_coordinator_took_100k_hostile_records() -> None:
    if not TALLY.thrown:  # run alone: throw them now
        test_hostile_records_are_refused_and_the_good_ones_still_fold()
    print(f"coordinator: {TALLY.thrown:,} hostile records, none raised")
    assert TALLY.thrown >= EXAMPLES * PER_EXAMPLE >= 100_000
