"""Issue 44: a node lives when it is heard from, not when its own clock says it wrote, and an incident's
timeline reads in the order things were learned: telemetry its producer held through a partition, or
from a host whose clock is behind, never dates a resolution before its incident opened, and never
makes a healthy node lost. Events are fed in the order they arrive, as the live detector feeds them."""

from __future__ import annotations

from tests.unit.streams.events import hb, healthy, opened
from trainmedic.streams.core import Detector

NODES = [f"n{i}" for i in range(10)]


def feed(detector: Detector, events: list) -> list:
    return [incident for event in events for incident in detector.observe(event)]


def test_a_node_back_from_a_partition_is_resolved_when_its_held_heartbeats_arrive() -> None:
    det = Detector()
    partitioned = healthy(0, 30, nodes=NODES) + healthy(30, 60, nodes=NODES[1:])
    out = feed(det, sorted(partitioned, key=lambda e: e.ts))
    [lost] = out
    assert (lost.category, lost.node, lost.ts) == ("node_lost", "n0", 29.02 + 3.0)
    arrival = det.state.clock  # 59.02: the others' newest
    held = [hb(t + 0.01, "n0") for t in range(30, 60)]  # what its producer held while its link was down
    [back] = feed(det, held)
    assert (back.id, back.status) == (lost.id, "resolved")
    assert back.ts == arrival > lost.ts  # not 30.01, the first held heartbeat's own time
    assert back.evidence[-1] == f"{arrival:.3f} resolved: n0 reports again"
    assert back.ts - back.first_ts > lost.ts - lost.first_ts  # "resolved in" is after it opened
    later = feed(det, sorted(healthy(60, 70, nodes=NODES), key=lambda e: e.ts))
    assert later == []  # not lost again: its last word came at its arrival, not at 59.01


def test_a_node_whose_clock_is_behind_the_others_is_not_lost() -> None:
    """n0's clock runs 2.5 s behind: its heartbeats, sharing partitions with the others', come after
    event time has passed them. Judged by its own clock, its 3 s timeout ran out every second."""
    det = Detector()
    arriving = []
    for t in range(10, 60):
        arriving += [hb(t + 0.01, node) for node in NODES[1:]] + [hb(t + 0.02 - 2.5, "n0")]
    assert feed(det, arriving) == []
    assert det.state.nodes["n0"].last_seen == 59.01  # when it was last heard of, as event time was then


def test_an_incident_opened_by_evidence_that_came_late_is_opened_when_it_came() -> None:
    det = Detector()
    feed(det, sorted(healthy(0, 20, nodes=NODES), key=lambda e: e.ts))
    flapped = [hb(12.0, "n3", links={"ib0": False}), hb(13.0, "n3", links={"ib0": True})]
    [flap] = opened(feed(det, flapped))  # came at 19.02, after event time had passed them
    assert (flap.category, flap.node, flap.ts, flap.first_ts) == ("link_flap", "n3", 19.02, 12.0)
