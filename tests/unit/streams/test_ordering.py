"""The reorder buffer alone: buckets released in `ts` order, `max_buffered` forcing, `order_at` waiting."""

from __future__ import annotations

import random

import pytest

import trainmedic.schemas as s
from trainmedic.streams.live import LiveConfig
from trainmedic.streams.ordering import AHEAD_S, Ordering

INF = float("inf")


def entries(times: list[float]) -> list[tuple]:
    return [(ts, f"e{n}", None) for n, ts in enumerate(times)]


def test_what_is_taken_due_comes_in_ts_order_arrival_order_among_equals() -> None:
    order = Ordering(LiveConfig())
    rng = random.Random(7)
    times = [round(rng.uniform(0, 2), 3) for _ in range(500)]
    held = entries(times)
    assert order.hold(held) == max(times) and order.count == 500
    due, forced = order.take_due(1.0)
    assert forced == 0 and due == sorted([e for e in held if e[0] <= 1.0], key=lambda e: e[0])
    rest, _ = order.take_due(3.0)
    assert order.count == 0 and not order.buckets and not order.keys
    assert rest == sorted([e for e in held if e[0] > 1.0], key=lambda e: e[0])


def test_past_max_buffered_the_oldest_are_forced_out_in_order() -> None:
    order = Ordering(LiveConfig(max_buffered=3))
    order.hold(entries([5.0, 1.0, 3.0, 2.0, 4.0]))
    due, forced = order.take_due(float("-inf"))
    assert forced == 2 and [e[0] for e in due] == [1.0, 2.0] and order.count == 3


def test_the_watermark_is_the_slowest_holding_source_less_lateness() -> None:
    order = Ordering(LiveConfig(lateness_s=0.5, idle_s=2.0))
    order.fed(("a", 0), order.hold(entries([10.0])), wall=100.0)
    order.fed(("b", 0), order.hold(entries([12.0])), wall=100.0)
    assert order.holding(100.5, caught_up=INF) == {("a", 0): 10.0, ("b", 0): 12.0}
    assert order.watermark(100.5, caught_up=INF) == 9.5
    # Quiet only as far as reads are complete: with reads known complete up to 100.0 nobody is idle.
    assert order.watermark(103.0, caught_up=100.0) == 9.5
    # Everything idle: event time goes on from the newest event at wall-clock pace.
    assert order.holding(103.0, caught_up=INF) == {}
    assert order.watermark(103.0, caught_up=INF) == 12.0 + 3.0 - 0.5


def test_past_order_at_what_arrives_waits_and_is_fed_up_to_ahead_s_past_the_slowest() -> None:
    order = Ordering(LiveConfig(order_at=2))
    order.take([(("slow", 0), entries([10.0])), (("fast", 0), entries([10.1]))], wall=1.0)
    assert order.count == 2 and not order.ahead
    order.take([(("fast", 0), entries([10.2, 10.4, 11.0, 12.0]))], wall=1.0)
    assert order.waiting == 4 and order.count == 2  # held past order_at: all wait
    order.feed_waiting(1.0, caught_up=INF, held_until=float("-inf"))
    # The slowest source arrived at 10.0: fed up to 10.0 + AHEAD_S, the rest still waits.
    assert [e[0] for e in order.ahead[("fast", 0)]] == [t for t in (11.0, 12.0) if t > 10.0 + AHEAD_S]
    assert order.waiting == 2 and order.count == 4 and order.sources[("fast", 0)].max_ts == 10.4
    # After a blind spell, until `held_until`, nothing waiting is fed.
    order.feed_waiting(2.0, caught_up=INF, held_until=5.0)
    assert order.waiting == 2


def test_a_held_failure_report_waits_failure_lateness_and_no_later_event_passes_with_it() -> None:
    """Reads known complete 0.08 s after the exit was fed: with `failure_lateness_s` 0.05 event time
    reaches the exit (not the step read after it); without, it stays `lateness_s` behind. Once the
    exit is released, the watermark is back to `lateness_s` behind (the detector keeps the higher)."""
    exit_ = s.WorkerExited(ts=10.0, node="n0", job="j", rank=0, world_size=1, generation=0, exit_code=None,
                           signal=9)
    for less, early, due in ((0.5, 9.54, []), (0.05, 9.99, [9.9, 10.0])):
        order = Ordering(LiveConfig(lateness_s=0.5, failure_lateness_s=less), awaited=lambda report: True)
        order.fed(("node", 0), order.hold(entries([9.9])), wall=100.0)
        order.fed(("worker", 0), order.hold([(10.0, exit_, None)]), wall=100.0)
        order.fed(("node", 0), order.hold(entries([10.02])), wall=100.02)
        assert order.watermark(100.04, caught_up=100.04) == pytest.approx(early)  # 0.04 s: not yet
        mark = order.watermark(100.08, caught_up=100.08)
        assert mark == pytest.approx(due[-1] if due else 9.58)
        assert [entry[0] for entry in order.take_due(mark)[0]] == due
        assert order.watermark(100.08, caught_up=100.08) == pytest.approx(9.58)
        assert order.newest_failure == -INF


def test_only_failure_reports_the_core_awaits_wait_less() -> None:
    order = Ordering(LiveConfig(lateness_s=0.5, failure_lateness_s=0.05),
                     awaited=lambda report: report.rank == 0)
    order.hold([(10.0, s.WorkerStepped(ts=10.0, node="n0", job="j", rank=0, world_size=1, generation=0,
                                       step=1, step_time=0.1), None),
                (10.1, s.WorkerFailed(ts=10.1, node="n0", job="j", rank=0, world_size=1, generation=0,
                                      error="RuntimeError: x"), None),
                *entries([10.2])])
    order.hold([(10.3, s.WorkerFailed(ts=10.3, node="n0", job="j", rank=1, world_size=2, generation=0,
                                      error="RuntimeError: x"), None)])  # not awaited
    assert order.newest_failure == 10.1
    more = Ordering(LiveConfig(lateness_s=0.05, failure_lateness_s=0.5), awaited=lambda report: True)
    more.hold([(10.1, s.WorkerExited(ts=10.1, node="n0", job="j", rank=0, world_size=1, generation=0,
                                     exit_code=1, signal=None), None)])
    assert more.newest_failure == -INF  # never more than lateness_s
