"""Which partitions the consumer engine stops reading while a backlog is ordered
(streams/engines/backpressure.py)."""

from __future__ import annotations

import trainmedic.schemas as s
from trainmedic.schemas import Topics
from trainmedic.streams.core import Detector
from trainmedic.streams.engines.backpressure import to_pause, unread_waits
from trainmedic.streams.engines.consumer import DetectorService
from trainmedic.streams.live import LiveConfig, LiveDetector
from trainmedic.streams.pipeline import Pipeline

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


def beat(ts: float, node: str) -> tuple:
    return ts, s.NodeHeartbeat(ts=ts, node=node, interval=1.0), None


class NoReads:
    """A ReadCheck asked to check no partition's reads: it confirms nothing."""

    def poll(self, offsets: dict, wall: float, about) -> None:
        assert not offsets, "a paused partition's reads were checked"


def test_with_every_partition_paused_behind_waiting_events_the_engine_is_not_blind() -> None:
    """After a blind spell, while the producers rejoin, what arrives waits; the engine stops reading
    each partition with events waiting. Asked about nothing, nothing would be confirmed: a blind
    spell again, and no partition read again. Every paused partition has events waiting, so the
    reads are complete now (`DetectorService._poll_reads`)."""
    live = LiveDetector(Detector(), LiveConfig(order_at=1, release_every_s=0.0, blind_s=3.0, rejoin_s=10.0))
    live.watch_reads()
    live.feed_many([(A, [beat(100.0, "a")])], 1000.0)
    live.caught_up(1000.0)
    live.tick(1004.0)  # blind
    live.caught_up(1004.0)  # back: the producers rejoin until 1014
    live.feed_many([(A, [beat(101.0, "a")]), (B, [beat(101.0, "b")])], 1004.5)
    assert live.waiting().keys() == {A, B}
    service = object.__new__(DetectorService)  # its loop's state alone: no Kafka clients
    service.pipeline, service.offsets, service._reads = Pipeline(Topics("t."), live), {A: 2, B: 1}, NoReads()
    service._paused_sources = frozenset({A, B})
    live.tick(1005.0)
    service._poll_reads(1005.0)
    live.tick(1005.5)
    assert live.blind_for == 0.5  # complete as of 1005
    service._paused_sources = frozenset({A, B, C})  # C paused with nothing waiting: not complete
    service.offsets[C] = 0
    service._poll_reads(1005.5)
    live.tick(1006.0)
    assert live.blind_for == 1.0
