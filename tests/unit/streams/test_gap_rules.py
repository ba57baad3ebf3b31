"""Telemetry gaps: many nodes quiet at once is the telemetry that stopped, not many lost nodes."""

from __future__ import annotations

import pytest

from tests.unit.streams.events import healthy, run
from trainmedic.streams.core import Detector, DetectorConfig, DetectorState, GapConfig

THREE = ["a", "b", "c"]
TEN = [f"n{i}" for i in range(10)]


def test_the_share_is_more_than_two_nodes_or_a_fifth():
    gap = GapConfig()
    assert [gap.is_gap(q, 3) for q in (1, 2, 3)] == [False, False, True]
    assert [gap.is_gap(q, 100) for q in (20, 21)] == [False, True]
    with pytest.raises(ValueError):
        GapConfig(share=1.0)


def test_every_node_silent_at_once_is_one_telemetry_gap_and_no_node_lost():
    events = healthy(0, 30, nodes=THREE)  # then nothing for 20 s: the telemetry stopped
    events += healthy(50, 60, nodes=THREE)
    out, _ = run(events)
    assert [(i.status, i.category, i.severity, i.action, i.node) for i in out] == [
        ("open", "telemetry_gap", "WARN", "alert", None),
        ("resolved", "telemetry_gap", "WARN", "alert", None)]
    assert "a, b, c" in out[0].evidence[0]
    assert out[0].ts == pytest.approx(29.02 + 3.0)  # decided when the first timeout passes
    assert out[1].ts == pytest.approx(50.01)  # the last node of the gap reports again


def test_one_node_silent_while_the_others_report_is_still_node_lost_in_time():
    out, _ = run(healthy(0, 30, nodes=TEN) + healthy(30, 60, nodes=TEN[1:]))
    assert [(i.category, i.node) for i in out if i.status == "open"] == [("node_lost", "n0")]
    assert out[0].ts - out[0].first_ts <= 6.0


def test_two_of_ten_silent_are_two_node_losts_three_are_a_gap():
    out, _ = run(healthy(0, 30, nodes=TEN) + healthy(30, 60, nodes=TEN[2:]))
    assert sorted(i.node for i in out if i.category == "node_lost") == ["n0", "n1"]
    out, _ = run(healthy(0, 30, nodes=TEN) + healthy(30, 40, nodes=TEN[3:]) + healthy(40, 42, nodes=TEN))
    assert [(i.status, i.category) for i in out] == [("open", "telemetry_gap"), ("resolved", "telemetry_gap")]


def test_after_a_gap_a_node_that_stays_silent_is_judged_from_the_data():
    events = healthy(0, 30, nodes=THREE) + healthy(50, 70, nodes=["b", "c"])
    out, _ = run(events)
    got = [(i.status, i.category, i.node) for i in out]
    assert got == [("open", "telemetry_gap", None), ("resolved", "telemetry_gap", None),
                   ("open", "node_lost", "a")]
    lost = out[2]
    assert lost.ts == pytest.approx(50.01 + 3.0)  # one heartbeat timeout after telemetry flowed again


def test_the_share_is_configurable():
    config = DetectorConfig(gap=GapConfig(min_nodes=3))
    out, _ = run(healthy(0, 30, nodes=THREE) + healthy(50, 60, nodes=THREE), Detector(config))
    assert sorted(i.node for i in out if i.category == "node_lost" and i.status == "open") == THREE


def test_a_gap_survives_a_checkpoint():
    det = Detector()
    out = []
    for event in healthy(0, 30, nodes=THREE):
        out += det.observe(event)
    out += det.advance(40.0)
    assert [i.category for i in out] == ["telemetry_gap"]
    again = Detector(det.config, DetectorState.from_dict(det.state.to_dict()))
    later = []
    for event in healthy(50, 60, nodes=THREE):
        later += again.observe(event)
    assert [(i.status, i.category) for i in later] == [("resolved", "telemetry_gap")]


def test_a_gap_that_lasts_is_nodes_gone_each_judged_alone_after_judge_after_s():
    config = DetectorConfig(gap=GapConfig(judge_after_s=60.0))
    det = Detector(config)
    out = []
    for event in healthy(0, 30, nodes=THREE):  # then nothing: every node's power went at once
        out += det.observe(event)
    out += det.advance(90.0)
    assert [(i.category, i.node) for i in out] == [("telemetry_gap", None)]
    out += det.advance(100.0)
    opened = [(i.status, i.category, i.severity, i.node) for i in out[1:]]
    assert sorted(opened) == [("open", "node_lost", "SEV1", n) for n in THREE] + [
        ("resolved", "telemetry_gap", "WARN", None)]
    lost = [i for i in out if i.category == "node_lost"]
    assert [i.ts for i in lost] == pytest.approx([29.02 + 3.0 + 60.0] * 3)  # joined the gap, then 60 s
    assert max(i.first_ts for i in lost) < 31.0  # still dated from their last telemetry, not the judgement
