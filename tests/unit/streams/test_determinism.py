"""Same evidence, same incidents: ids, live-vs-replay, save/restore, input order."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import msgspec
import pytest

from trainmedic.streams.core import Detector, DetectorState
from trainmedic.streams.core.ids import incident_id
from trainmedic.streams.replay import read_events, replay

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
SAMPLE = ["node_lost_gloo", "gpu_lost_xid79", "hang_rank", "escalation_sev2_same_node",
          "straggler", "thermal", "link_flap", "network_conn_refused"]


def _events(name):
    with (SCENARIOS / f"{name}.jsonl").open() as lines:
        return sorted(read_events(lines, io.StringIO()), key=lambda e: e.ts)


def _dump(incidents):
    return [i.model_dump_json() for i in incidents]


def test_ids_hash_the_evidence_and_nothing_else():
    a = incident_id("gpu_ecc", "n1", "gpu 3|xid 48", 1700000030.123)
    assert a == incident_id("gpu_ecc", "n1", "gpu 3|xid 48", 1700000030.123)
    assert a.startswith("gpu_ecc-") and len(a) == len("gpu_ecc-") + 12
    assert a != incident_id("gpu_ecc", "n1", "gpu 3|xid 48", 1700000030.124)
    assert a != incident_id("gpu_ecc", "n2", "gpu 3|xid 48", 1700000030.123)


@pytest.mark.parametrize("name", SAMPLE)
def test_live_ticks_give_the_same_incidents_as_replay(name):
    """The live app also calls advance(wall time) while streams are idle; decisions carry
    their deadline as ts, so the extra ticks change nothing."""
    events = _events(name)
    rng = random.Random(name)
    live, detector = [], Detector()
    for event in events:
        tick = event.ts - rng.uniform(0, 0.7)
        live += detector.advance(tick)
        live += detector.observe(event)
    live += detector.drain()
    assert _dump(live) == _dump(replay(events))


@pytest.mark.parametrize("name", SAMPLE)
def test_state_saved_and_restored_midway_carries_on_identically(name):
    events = _events(name)
    whole = replay(events)
    first, rest = events[: len(events) // 2], events[len(events) // 2:]
    detector, out = Detector(), []
    for event in first:
        out += detector.observe(event)
    saved = json.loads(json.dumps(detector.state.to_dict()))
    fast = DetectorState.from_dict(msgspec.msgpack.decode(detector.state.to_msgpack()))
    assert fast.to_dict() == saved  # the checkpoints' encoding says the same
    restored = Detector(detector.config, DetectorState.from_dict(saved))
    for event in rest:
        out += restored.observe(event)
    out += restored.drain()
    assert _dump(out) == _dump(whole)
    assert DetectorState.from_dict(saved).to_dict() == saved


def test_state_saved_while_evidence_is_on_hold_keeps_it():
    events = _events("cuda_error_illegal_access")
    cut = next(n for n, e in enumerate(events) if e.type == "worker_error") + 3
    detector = Detector()
    for event in events[:cut]:
        assert detector.observe(event) == []
    saved = json.loads(json.dumps(detector.state.to_dict()))
    assert saved["jobs"]["job-a"]["group"] is not None
    restored, out = Detector(state=DetectorState.from_dict(saved)), []
    for event in events[cut:]:
        out += restored.observe(event)
    assert _dump(out) == _dump(replay(events))


def test_input_order_does_not_matter():
    events = _events("process_exit_oom_kill")
    shuffled = list(events)
    random.Random(1).shuffle(shuffled)
    assert _dump(replay(shuffled)) == _dump(replay(events))
