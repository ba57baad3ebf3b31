"""`trainmedic nodes list`'s rows, from a folded state (the broker-backed run is in tests/integration)."""

from __future__ import annotations

from tests.unit.coordinator.test_lifecycle import shrunk
from trainmedic.ops.nodes import rows
from trainmedic.recovery.coordinator.core import apply
from trainmedic.schemas import NodeCordoned, NodeLeaving, NodeReadmitted


def test_each_state_says_why_and_since_when() -> None:
    rec = shrunk()  # n3 isolated at t=50 for incident gpu, still open
    apply(rec.state, NodeCordoned(ts=55.0, node="n1", reason="bios update"))
    assert rows(rec.state, 115.0) == [
        ("n1", "cordoned", "1970-01-01 00:00:55 (1m00s ago)", "bios update", "llm"),
        ("n2", "ready", "-", "-", "llm"),
        ("n3", "isolated", "1970-01-01 00:00:50 (1m05s ago)",
         "incident gpu (gpu_lost, open); back 300 s after its incident resolves", "-"),
    ]


def test_a_readmitted_node_is_ready_and_says_so() -> None:
    rec = shrunk()
    apply(rec.state, NodeReadmitted(ts=400.0, node="n3", incident_id="gpu", reason="clean"))
    assert [r for r in rows(rec.state, 460.0) if r[0] == "n3"] == [
        ("n3", "ready", "1970-01-01 00:06:40 (1m00s ago)",
         "re-admitted by the coordinator after its probation", "-")]


def test_a_node_that_left_by_itself_says_so() -> None:
    rec = shrunk()
    apply(rec.state, NodeLeaving(ts=100.0, node="n1", reason="SIGTERM: planned shutdown"))
    assert [r for r in rows(rec.state, 160.0) if r[0] == "n1"] == [
        ("n1", "leaving", "1970-01-01 00:01:40 (1m00s ago)",
         "announced by the node itself: SIGTERM: planned shutdown", "llm")]
