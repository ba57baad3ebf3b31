"""Event time and partitions read to their end (`ordering.through`): what a partition appends later is
stamped later, so one whose reads are known complete moves on at wall-clock pace, and the last event
before a quiet spell (a failure's last report) is released without waiting for it to go idle."""

from __future__ import annotations

import pytest

from tests.unit.streams.events import exited, hb
from trainmedic.streams.core import Detector
from trainmedic.streams.live import LiveConfig, LiveDetector
from trainmedic.streams.ordering import Ordering

INF = float("inf")


def quiet_pair() -> Ordering:
    """Two partitions that delivered at wall 100: a up to event time 10.0, b up to 9.8."""
    order = Ordering(LiveConfig(lateness_s=0.5, idle_s=2.0))
    order.fed(("a", 0), order.hold([(10.0, "a", None)]), wall=100.0)
    order.fed(("b", 0), order.hold([(9.8, "b", None)]), wall=100.0)
    return order


def test_a_partition_read_to_its_end_moves_on_at_wall_clock_pace() -> None:
    assert quiet_pair().watermark(100.7, caught_up=100.6) == pytest.approx(9.8 + 0.6 - 0.5)


def test_a_partition_not_known_read_to_its_end_holds_where_it_delivered() -> None:
    assert quiet_pair().watermark(100.7, caught_up=99.0) == 9.8 - 0.5  # reads confirmed only before it
    assert quiet_pair().watermark(100.7, caught_up=INF) == 9.8 - 0.5  # reads not watched


def test_a_failures_last_report_is_released_once_reads_are_complete_not_when_its_partition_idles() -> None:
    """With the failure report waiting `lateness_s` as any event (test_failure_lateness.py: less)."""
    live = LiveDetector(Detector(), LiveConfig(lateness_s=0.5, failure_lateness_s=0.5, idle_s=2.0,
                                               release_every_s=0.0))
    live.watch_reads()
    for t in range(10):  # heartbeats of two nodes on their partitions, read as they come
        live.feed(hb(t + 0.01, "n0"), ("node", 0), wall=t + 0.02)
        live.feed(hb(t + 0.51, "n1"), ("node", 1), wall=t + 0.52)
        live.caught_up(t + 0.52)
    live.feed(exited(9.6, 0, node="n0"), ("worker", 3), wall=9.61)  # its partition's last, for now
    live.caught_up(9.9)
    live.tick(9.95)
    assert live.watermark < 9.6
    live.caught_up(10.15)
    live.tick(10.2)
    assert live.watermark >= 9.6 and live.detector.state.jobs["j"].group is not None  # seen, on hold
