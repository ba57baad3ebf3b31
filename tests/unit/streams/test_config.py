from __future__ import annotations

import json

import pytest

from trainmedic.streams.core import DetectorConfig, HangConfig


def test_defaults_follow_the_taxonomy():
    cfg = DetectorConfig()
    esc = cfg.escalation
    assert (esc.sev3_count, esc.sev3_window_s, esc.sev2_count, esc.sev2_window_s) == (
        3, 600.0, 2, 1800.0)
    assert cfg.correlation.evidence_hold_s <= 1.0
    assert cfg.hang.floor_s < 60


def test_round_trips_through_json():
    cfg = DetectorConfig.from_dict({"hang": {"floor_s": 30.0}, "escalation": {"sev2_count": 3}})
    again = DetectorConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg and again.hang.floor_s == 30.0


@pytest.mark.parametrize("bad", [
    {"hang": {"factor": 1.0}},
    {"hang": {"floor_s": 0}},
    {"hang": {"warmup_s": 5.0}},  # below the floor
    {"correlation": {"evidence_hold_s": 3.0, "symptom_hold_s": 2.0}},
    {"correlation": {"symptom_hold_s": 25.0}},  # as long as the hang floor
    {"gpu": {"silence_s": 1.0}},
    {"escalation": {"sev3_count": 1}},
    {"straggler": {"ratio": 0.9}},
    {"heartbeat": {"missed": 0.5}},
    {"nope": {}},
    {"hang": {"floor": 3}},
    {"hang": {"floor_s": float("inf")}},  # bounded: the state it makes is saved as JSON
    {"hang": {"factor": 1e300}},  # a threshold of factor x a step time would overflow
    {"heartbeat": {"min_timeout_s": float("nan")}},
])
def test_invalid_settings_are_refused_when_built(bad):
    with pytest.raises((ValueError, TypeError)):
        DetectorConfig.from_dict(bad)


def test_config_is_frozen():
    with pytest.raises(AttributeError):
        HangConfig().floor_s = 1.0
