"""Issue 12: an incident whose times no date can show never reaches the alert payloads or the
incident log's rendering: it is dead-lettered, and what comes after it is still delivered and shown."""

from __future__ import annotations

import json

import pytest

from tests.unit.ops.test_alert_core import CONFIG, incident
from trainmedic.bus.message import RawMessage, parse_message
from trainmedic.bus.settings import KafkaSettings
from trainmedic.ops.alerts.bridge import AlertBridge
from trainmedic.ops.incidents.fold import IncidentHistory, apply
from trainmedic.ops.incidents.render import details, iso, row, story
from trainmedic.ops.incidents.views import timeline, views
from trainmedic.schemas import DeadLettered, encode

SETTINGS = KafkaSettings.from_env({"TRAINMEDIC_KAFKA_BOOTSTRAP": "127.0.0.1:1",
                                   "TRAINMEDIC_TOPIC_PREFIX": "t."})
TOPIC = SETTINGS.topics.incidents
BAD_TIMES = [("first_ts", "-Infinity"), ("first_ts", "1e300"), ("ts", "1e300"), ("ts", "NaN"),
             ("first_ts", "-1e300")]


def hostile(field: str, number: str) -> bytes:
    good = json.loads(encode(incident()))
    return json.dumps(good).replace(f'"{field}": {good[field]}', f'"{field}": {number}').encode()


@pytest.mark.parametrize(("field", "number"), BAD_TIMES)
def test_the_alert_bridge_dead_letters_a_bad_time_and_delivers_the_next(field: str, number: str) -> None:
    raw = hostile(field, number)
    assert number.encode() in raw
    bridge = AlertBridge(SETTINGS, CONFIG, clock=lambda: 1_700_000_020.0)
    letter = bridge.admit(RawMessage(TOPIC, 0, 0, 0, b"llm", raw))
    assert isinstance(letter, DeadLettered) and field in letter.reason and letter.raw_value() == raw
    assert bridge.admit(RawMessage(TOPIC, 0, 1, 0, b"llm", encode(incident()))) is None
    assert [delivery.incident.id for _, delivery in bridge.book.due(1_700_000_020.0)] == ["node_lost-abc"] * 3
    assert bridge.book.offsets.committable() == {(TOPIC, 0): 1}  # both offsets done once delivered


@pytest.mark.parametrize(("field", "number"), BAD_TIMES)
def test_the_incident_log_skips_a_bad_time_and_renders_the_rest(field: str, number: str) -> None:
    history = IncidentHistory()
    for offset, raw in enumerate([hostile(field, number), encode(incident())]):
        parsed = parse_message(SETTINGS.topics, TOPIC, 0, offset, b"llm", raw, now=0.0)
        if not isinstance(parsed, DeadLettered):
            apply(history, parsed.event)
    [view] = views(history)
    assert row(view)[6] == "2023-11-14 22:13:30.000" and "first evidence:" in details(view)
    assert story(view, timeline(view))


def test_rendering_a_time_no_date_can_show_gives_the_number() -> None:
    assert iso(1e300) == "1e+300" and iso(float("-inf")) == "-inf"
