"""Every scenario recording through `replay`: the expected incidents, in order, within the
detection delay each allows. The recordings are data (tests/scenarios/make_scenarios.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from trainmedic.streams.replay import read_events, replay

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
NAMES = sorted(p.name.removesuffix(".expected.json") for p in SCENARIOS.glob("*.expected.json"))
FIELDS = ("status", "category", "severity", "action", "node", "job")


def load(name: str) -> tuple[list, dict, str]:
    errors = io.StringIO()
    with (SCENARIOS / f"{name}.jsonl").open() as lines:
        events = read_events(lines, errors, name)
    expected = json.loads((SCENARIOS / f"{name}.expected.json").read_text())
    return events, expected, errors.getvalue()


def test_there_is_a_scenario_for_every_category():
    from trainmedic.streams.core.taxonomy import CATEGORIES

    covered = {item["category"] for name in NAMES for item in load(name)[1]["incidents"]}
    assert covered == set(CATEGORIES)


@pytest.mark.parametrize("name", NAMES)
def test_scenario(name):
    events, expected, errors = load(name)
    incidents = replay(events)
    got = [{f: str(getattr(i, f)) if f != "node" and f != "job" else getattr(i, f)
            for f in FIELDS} for i in incidents]
    want = [{f: item[f] for f in FIELDS} for item in expected["incidents"]]
    assert got == want, "\n".join(i.model_dump_json() for i in incidents)
    for incident, item in zip(incidents, expected["incidents"], strict=True):
        if "ranks" in item:
            assert list(incident.ranks) == item["ranks"]
        if "fault_ts" in item:
            delay = incident.ts - item["fault_ts"]
            assert -1e-6 <= delay <= item["max_delay_s"] + 1e-6, f"{incident.id}: delay {delay}"
        assert incident.first_ts <= incident.ts
    opened = {i.id for i in incidents if i.status == "open"}
    assert all(i.id in opened for i in incidents if i.status == "resolved")
    reported = [int(line.split(":")[1]) for line in errors.splitlines()]
    assert reported == expected.get("bad_lines", [])
