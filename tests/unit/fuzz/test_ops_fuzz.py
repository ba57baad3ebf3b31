"""The incident log and the alert bridge under 100,000 hostile values each: none raises, each is
dead-lettered, and what they show and deliver is what the good records alone give, whatever their
order and however often they come."""

from __future__ import annotations

import json
import random

from hypothesis import given

from tests.unit.fuzz.hostile import EXAMPLES, FUZZ, PER_EXAMPLE, Tally, atoms, batch, interleave, seeds
from tests.unit.ops.incident_log import placed
from tests.unit.ops.test_alert_core import CONFIG
from tests.unit.ops.test_poison import SETTINGS
from trainmedic.bus.message import RawMessage, parse_message
from trainmedic.ops.alerts.bridge import AlertBridge
from trainmedic.ops.incidents.fold import IncidentHistory, apply
from trainmedic.ops.incidents.render import details, row, story
from trainmedic.ops.incidents.views import timeline, views
from trainmedic.schemas import DeadLettered, encode

# the detector's incidents and the coordinator's lifecycle: two topics, read as one log
TOPICS = [SETTINGS.topics.incidents, SETTINGS.topics.recovery]
GOOD = [(SETTINGS.topics.name(topic), encode(event)) for (topic, _), event in placed()]
TEMPLATES = [json.loads(value) for _, value in GOOD]


def hostile(rng: random.Random, pool: list) -> list[tuple[str, bytes | None]]:
    return [(rng.choice(TOPICS), value) for value in batch(rng, TEMPLATES, pool)]


def shown(history: IncidentHistory) -> list[str]:
    return [f"{row(v)}\n{details(v)}\n{story(v, timeline(v))}" for v in views(history)]


def fold(items: list[tuple[bool, tuple[str, bytes | None]]]) -> tuple[IncidentHistory, int]:
    history, letters = IncidentHistory(), 0
    for offset, (is_good, (topic, value)) in enumerate(items):
        parsed = parse_message(SETTINGS.topics, topic, 0, offset, b"k", value, now=0.0)
        if isinstance(parsed, DeadLettered):
            assert not is_good, parsed.reason
            letters += 1
        else:
            assert is_good
            apply(history, parsed.event)
    return history, letters


def bridge(items: list[tuple[bool, tuple[str, bytes | None]]]) -> tuple[AlertBridge, int]:
    alerts, letters = AlertBridge(SETTINGS, CONFIG, clock=lambda: 100.0), 0
    for offset, (is_good, (topic, value)) in enumerate(items):
        letter = alerts.admit(RawMessage(topic, 0, offset, 0, b"k", value))
        assert (letter is None) == is_good
        letters += letter is not None
    return alerts, letters


CLEAN_LOG = shown(fold([(True, v) for v in GOOD])[0])
CLEAN_ALERTS = bridge([(True, v) for v in GOOD])[0]
LOG, ALERTS = Tally(), Tally()


@FUZZ
@given(seed=seeds, pool=atoms)
def test_the_incident_log_shows_the_good_records_only(seed: int, pool: list) -> None:
    rng = random.Random(seed)
    bad = hostile(rng, pool)
    good = [*GOOD, *rng.choices(GOOD, k=len(GOOD))]  # duplicated, and out of order
    rng.shuffle(good)
    history, letters = fold(interleave(rng, good, bad))
    assert letters == len(bad) and shown(history) == CLEAN_LOG
    LOG.thrown += len(bad)


@FUZZ
@given(seed=seeds, pool=atoms)
def test_the_alert_bridge_delivers_the_good_records_only(seed: int, pool: list) -> None:
    rng = random.Random(seed)
    bad = hostile(rng, pool)
    alerts, letters = bridge(interleave(rng, GOOD, bad))
    assert letters == len(bad)
    assert alerts.open == CLEAN_ALERTS.open
    assert [(s, d.incident) for s, d in alerts.book.due(100.0)] == \
        [(s, d.incident) for s, d in CLEAN_ALERTS.book.due(100.0)]
    ALERTS.thrown += len(bad)


def test_each_took_100k_hostile_values() -> None:
    if not LOG.thrown:
        test_the_incident_log_shows_the_good_records_only()
    if not ALERTS.thrown:
        test_the_alert_bridge_delivers_the_good_records_only()
    print(f"incident log: {LOG.thrown:,}, alert bridge: {ALERTS.thrown:,} hostile values, none raised")
    assert min(LOG.thrown, ALERTS.thrown) >= EXAMPLES * PER_EXAMPLE >= 100_000
