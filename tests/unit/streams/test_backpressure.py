"""Which partitions the consumer engine stops reading while a backlog is ordered (streams/backpressure.py)."""

from __future__ import annotations

from streams.backpressure import to_pause, unread_waits

A, B, C = ("gpu", 0), ("gpu", 1), ("node", 0)


def test_under_pause_at_nothing_new_is_paused_and_what_was_stays_until_fed() -> None:
    assert to_pause({A: 5_000, B: 10}, 999, frozenset(), pause_at=1_000, sources=3) == frozenset()
    assert to_pause({A: 5_000, B: 10}, 999, frozenset({A, C}), pause_at=1_000, sources=3) == {A}


def test_at_pause_at_a_partition_with_more_than_its_share_waiting_is_paused() -> None:
    # A share is pause_at / sources = 333: B waits less, and is read on (pausing loses its prefetch).
    assert to_pause({A: 334, B: 333}, 1_000, frozenset(), pause_at=1_000, sources=3) == {A}
    assert to_pause({A: 334, B: 333}, 1_000, frozenset({B}), pause_at=1_000, sources=3) == {A, B}


def test_a_partition_with_nothing_waiting_is_never_paused() -> None:
    # it may be the one holding event time back: paused, nothing would ever be fed
    assert to_pause({A: 900}, 5_000, frozenset({B, C}), pause_at=1_000, sources=3) == {A}


def test_reads_are_complete_when_every_partition_not_read_has_events_waiting() -> None:
    waiting = {A: 5, B: 1}
    assert unread_waits([A, B, C], frozenset({A, B}), waiting)  # C is read: its confirmation counts
    assert not unread_waits([A, B, C], frozenset({A, C}), waiting)  # C paused with nothing waiting
    assert unread_waits([A, B], frozenset({A, B}), waiting)  # none read: complete now
    assert unread_waits([A, B, C], frozenset(), {})
