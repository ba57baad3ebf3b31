"""The read tracker alone: reads known complete, the detector's own pauses, blind spells."""

from __future__ import annotations

from trainmedic.streams.live import LiveConfig
from trainmedic.streams.ordering import Source
from trainmedic.streams.read_tracking import ReadTracker

INF = float("inf")


def test_unwatched_it_is_never_blind_and_holds_nothing() -> None:
    reads = ReadTracker(LiveConfig(), {})
    assert reads.blind_for is None
    reads.caught_up(5.0, watermark=1.0)
    assert reads.caught_up_at == INF and reads.hold(7.0, 100.0, 1.0) == 7.0


def test_a_blind_spell_holds_event_time_through_the_spell_and_rejoin_s_after() -> None:
    sources = {("a", 0): Source(10.0, 0.0)}
    reads = ReadTracker(LiveConfig(blind_s=3.0, rejoin_s=10.0, idle_s=2.0), sources)
    reads.watch()
    reads.called_at = 0.0
    assert reads.blind_for == INF
    reads.caught_up(0.0, watermark=9.0)
    assert reads.blind_for == 0.0 and reads.hold(9.5, 1.0, 9.0) == 9.5
    reads.called_at = 5.0
    assert reads.hold(12.0, 5.0, 9.5) == 9.5 and reads.held_until == INF  # no news for 5 s: blind
    reads.caught_up(5.0, watermark=9.5)  # reads complete again: rejoin_s from now
    assert reads.held_until == 15.0 and reads.hold(12.0, 14.0, 9.5) == 9.5
    assert reads.hold(12.0, 15.0, 9.5) == 12.0
    # The spell and the rejoin (less idle_s) did not count as the source's quiet.
    assert sources[("a", 0)].last_wall == 13.0


def test_a_stall_is_neither_read_nor_quiet() -> None:
    sources = {("a", 0): Source(10.0, 1.0, read_at=2.0)}
    reads = ReadTracker(LiveConfig(), sources)
    reads.watch()
    reads.caught_up(2.0, watermark=0.0)
    reads.called_at = 2.0
    reads.stalled(6.0)
    assert sources[("a", 0)].last_wall == 5.0  # shifted by the 4 s stalled
    assert reads.caught_up_at == 2.0 and sources[("a", 0)].read_at == 2.0


def test_read_through_marks_only_known_sources() -> None:
    sources = {("a", 0): Source(1.0, 0.0)}
    reads = ReadTracker(LiveConfig(), sources)
    reads.read_through(3.0, frozenset({("a", 0), ("b", 0)}))
    assert sources[("a", 0)].read_at == 3.0 and ("b", 0) not in sources
