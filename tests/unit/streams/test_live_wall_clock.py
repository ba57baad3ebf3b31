"""LiveDetector and the wall clock: when wall time moves event time on (a silent cluster, a
partition that goes quiet) and when it must not (blind to its reads, stalled, reading behind,
waiting for producers to rejoin)."""

from __future__ import annotations

import pytest

import trainmedic.schemas as s
from tests.unit.streams.live_feed import Recording, beat
from trainmedic.streams.core import Detector
from trainmedic.streams.live import LiveConfig, LiveDetector


def test_a_silent_cluster_is_noticed_by_wall_time_alone() -> None:
    live = LiveDetector(Detector(), LiveConfig(lateness_s=0.5, idle_s=2.0))
    for t in range(5):
        beat = s.NodeHeartbeat(ts=100.0 + t, node="n1", interval=1.0)
        assert live.feed(beat, ("node", 0), 1000.0 + t) == []
    quiet = [live.tick(1004.0 + dt) for dt in (0.5, 1.0, 2.0, 3.0)]
    assert not any(quiet)
    later = [i for dt in range(4, 12) for i in live.tick(1004.0 + dt)]
    assert [(i.category, i.node, i.status) for i in later] == [("node_lost", "n1", "open")]
    assert later[0].ts - later[0].first_ts <= 6.0


def test_a_blind_spell_ends_at_the_first_confirmation_however_soon_after_the_last() -> None:
    """A detector reading 2 s behind: each confirmation is 2 s after the one before, under blind_s,
    but the wall clock is 3 s past the last when the spell begins. It ends at the next one."""
    live = LiveDetector(Detector(), LiveConfig(lateness_s=0.5, blind_s=3.0, rejoin_s=1.0, idle_s=2.0))
    live.watch_reads()
    live.caught_up(0.0)
    live.feed(s.NodeHeartbeat(ts=100.0, node="n", interval=1.0), ("node", 0), 0.0)
    live.tick(3.1)  # 3.1 s since the last confirmation: blind
    assert live.watermark == 99.5
    live.caught_up(2.0)  # asked at 2.0, reached now
    for n in range(1, 20):
        live.feed(s.NodeHeartbeat(ts=100.0 + n / 4, node="n", interval=1.0), ("node", 0), 3.1 + n / 4)
        live.caught_up(2.0 + n / 4)
    assert live.watermark > 103.0  # event time moved on after the 1 s rejoin


def _beats(live: LiveDetector, nodes: list[str], t0: float, t1: int, wall0: float) -> None:
    for t in range(t1 - int(t0)):
        for n, node in enumerate(nodes):
            live.feed(s.NodeHeartbeat(ts=t0 + t, node=node, interval=1.0), ("node", n), wall0 + t)


def test_blind_is_not_dead_event_time_stops_where_reads_were_last_complete() -> None:
    """The engine watches its reads; while it cannot confirm them (broker down, frozen) the
    wall clock is not event time, and nothing is decided from the silence."""
    live = LiveDetector(Detector(), LiveConfig(lateness_s=0.5, idle_s=2.0))
    live.watch_reads()
    _beats(live, ["a", "b", "c"], 100.0, 110, 1000.0)
    live.caught_up(1009.0)
    out = []
    for n in range(1, 120):  # 30 s of ticks with no confirmation: blind
        out += live.tick(1009.0 + n * 0.25)
    assert out == [] and live.watermark < 110.0
    assert live.blind_for is not None and live.blind_for > 25
    _beats(live, ["a", "b", "c"], 110.0, 115, 1039.0)  # reads again: decisions from the data
    for n in range(1, 45):  # confirmed again, nothing new: the partitions hold event time while
        live.caught_up(1043.0 + n * 0.25)  # producers rejoin (rejoin_s), then it moves with the wall
        out += live.tick(1043.0 + n * 0.25)
        if n == 32:  # held where it was when reads came back
            assert live.watermark <= 114.0 - 0.5
    assert out == [] and live.watermark == pytest.approx(114.0 + 2.75 - 0.5)


def test_with_reads_confirmed_a_silent_node_is_still_lost_in_time() -> None:
    live = LiveDetector(Detector(), LiveConfig(lateness_s=0.5, idle_s=2.0))
    live.watch_reads()
    _beats(live, ["a", "b", "c"], 100.0, 105, 1000.0)
    out = []
    for n in range(1, 40):  # a and b go on, c is silent; reads confirmed every 0.5 s
        wall = 1004.0 + n * 0.25
        if n % 4 == 0:
            for k, node in enumerate(["a", "b"]):
                out += live.feed(s.NodeHeartbeat(ts=wall - 900.0, node=node, interval=1.0), ("node", k), wall)
        if n % 2 == 0:
            live.caught_up(wall - 0.1)
        out += live.tick(wall)
    lost = [i for i in out if i.status == "open"]
    assert [(i.category, i.node) for i in lost] == [("node_lost", "c")]
    assert lost[0].ts - lost[0].first_ts <= 6.0


def test_a_stalled_detector_does_not_turn_its_pause_into_event_time() -> None:
    live = LiveDetector(Detector(), LiveConfig(lateness_s=0.5, idle_s=2.0))
    _beats(live, ["a", "b", "c"], 100.0, 105, 1000.0)
    for n in range(1, 5):
        live.tick(1004.0 + n * 0.25)
    mark = live.watermark
    out = live.tick(1025.0)  # SIGSTOP for 20 s, then a tick
    assert out == [] and live.watermark == mark


def test_a_trickle_of_old_timestamps_does_not_hold_the_watermark() -> None:
    """A partition that delivers but never moves on in event time goes idle after idle_s."""
    live = LiveDetector(Detector(), LiveConfig(lateness_s=0.5, idle_s=2.0))
    out = []
    for n in range(40):
        wall = 1000.0 + n * 0.25
        out += live.feed(s.NodeHeartbeat(ts=1.0, node="old", interval=1.0), ("node", 1), wall)
        out += live.feed(s.GpuSample(ts=100.0 + n * 0.25, node="a", gpu=0, xids=(79,) if n == 20 else ()),
                         ("gpu", 0), wall)
        out += live.tick(wall)
    assert live.watermark > 100.0
    assert [i.category for i in out if i.category == "gpu_lost"] == ["gpu_lost"]


def test_after_a_blind_spell_a_late_backlog_behind_fresh_data_is_not_silence() -> None:
    """Nodes share partitions: after an outage one node's producer may deliver its fresh data
    before another's backlog lands in the same partition. Event time waits rejoin_s."""
    live = LiveDetector(Detector(), LiveConfig(lateness_s=0.5, idle_s=2.0, rejoin_s=10.0))
    live.watch_reads()
    out = []
    _beats(live, ["a", "b", "c"], 100.0, 105, 1000.0)
    live.caught_up(1004.0)
    for n in range(1, 80):  # 20 s: the broker is down
        out += live.tick(1004.0 + n * 0.25)
    wall = 1024.0
    live.caught_up(wall)
    for t in range(25):  # a's and c's producers deliver what they held and go on; b's is 5 s late
        for k, node in ((0, "a"), (0, "c")):
            beat = s.NodeHeartbeat(ts=105.0 + t, node=node, interval=1.0)
            out += live.feed(beat, ("node", k), wall + 0.01 * t)
    for n in range(1, 21):
        out += live.tick(wall + n * 0.25)
        live.caught_up(wall + n * 0.25)
    for t in range(25):
        out += live.feed(s.NodeHeartbeat(ts=105.0 + t, node="b", interval=1.0), ("node", 0), wall + 5.3)
    for n in range(22, 42):
        out += live.tick(wall + n * 0.25)
        live.caught_up(wall + n * 0.25)
    assert out == []
    assert live.watermark > 120.0


def test_while_event_time_stands_still_what_arrives_waits_and_none_is_released_early() -> None:
    """After a blind spell, event time stays where it was for rejoin_s while the producers deliver
    what they held. Past `order_at`, what arrives then waits unfed (an engine stops reading what
    waits, past `pause_at`): fed, it would be held past `max_buffered` and the oldest released
    early, out of order, while event time stands still."""
    live = LiveDetector(Recording(), LiveConfig(lateness_s=0.5, idle_s=2.0, blind_s=3.0, rejoin_s=10.0,
                                                release_every_s=0.0, order_at=10, max_buffered=40))
    live.watch_reads()
    nodes = ["a", "b", "c", "d"]
    for t in range(5):
        live.feed_many([(("node", n), [beat(100.0 + t, node)]) for n, node in enumerate(nodes)], 1000.0 + t)
        live.caught_up(1000.0 + t)
    for n in range(1, 80):  # 20 s: the broker is down
        live.tick(1004.0 + n * 0.25)
    wall = 1024.0
    live.caught_up(wall)  # back: event time waits rejoin_s for what the producers held
    for t in range(11):  # 11 s of each node's telemetry, a second of it every 0.25 s
        live.feed_many([(("node", n), [beat(105.0 + t, node)]) for n, node in enumerate(nodes)],
                       wall + t / 4)
        live.caught_up(wall + t / 4)
    assert live.forced == 0 and live.buffered == 4 + 44 and live.watermark == 103.5
    for n in range(11, 60):  # the rejoin is over: fed and released in order
        live.tick(wall + n / 4)
        live.caught_up(wall + n / 4)
    seen = [e.ts for e in live.detector.seen]
    assert live.forced == 0 and seen == sorted(seen) and len(seen) == 4 * 16 and live.waiting() == {}


def test_while_event_time_stands_still_at_most_max_buffered_wait() -> None:
    """An engine that cannot stop reading (the Faust engine): past `max_buffered` waiting, what
    waits is fed and the oldest held go early, as the last resort: memory stays bounded (at most
    `max_buffered` held and as many waiting)."""
    live = LiveDetector(Recording(), LiveConfig(lateness_s=0.5, idle_s=2.0, blind_s=3.0, rejoin_s=10.0,
                                                release_every_s=0.0, order_at=10, max_buffered=40))
    live.watch_reads()
    live.caught_up(1000.0)
    live.feed_many([(("node", n), [beat(100.0, f"n{n}")]) for n in range(4)], 1000.0)
    live.tick(1004.0)  # blind
    for t in range(1, 31):
        live.feed_many([(("node", n), [beat(100.0 + t, f"n{n}")]) for n in range(4)], 1004.0 + t / 100)
        assert live.buffered <= 2 * 40 + 4
    assert live.forced > 0


def test_a_detector_reading_further_behind_than_blind_s_is_behind_not_blind() -> None:
    """Overloaded, a detector reads 4 s behind: each confirmation comes 4 s after it was asked, one
    every 0.25 s. It is behind, not blind: event time follows what it reads. (Counted blind by the
    age of what was confirmed, event time stood still for rejoin_s while it read on: in the bench at
    90k events/s the sharded decider held a million events and released most early, out of order.)"""
    live = LiveDetector(Recording(), LiveConfig(lateness_s=0.5, idle_s=2.0, blind_s=3.0, rejoin_s=10.0,
                                                release_every_s=0.0))
    live.watch_reads()
    for k in range(120):  # 30 s, a fetch every 0.25 s, of telemetry from 4 s before
        wall = 1000.0 + k / 4
        live.feed_many([(("node", n), [beat(wall - 900.0 - 4.0, node)]) for n, node in enumerate("ab")], wall)
        if k >= 16:
            live.caught_up(wall - 4.0)
    assert live.watermark == 1000.0 + 119 / 4 - 900.0 - 4.0 - 0.5 and live.buffered == 4
    assert live.blind_for == 4.0  # what it says: reads known complete as of 4 s ago


def test_news_of_a_moment_before_the_last_confirmed_still_says_the_reads_go_on() -> None:
    """A detector 20 s behind is confirmed complete now once every partition is paused behind
    events waiting (`DetectorService._poll_reads`); answers asked before that are still reached
    for 20 s. They say nothing new of what was read, but that reads go on: it is not blind.
    (Ignored, event time stood still for 20 s after each such moment.)"""
    live = LiveDetector(Recording(), LiveConfig(lateness_s=0.5, idle_s=2.0, blind_s=3.0, rejoin_s=10.0,
                                                release_every_s=0.0))
    live.watch_reads()
    for k in range(200):  # 50 s, a fetch every 0.25 s, of telemetry from 20 s before
        wall = 1000.0 + k / 4
        live.feed_many([(("node", n), [beat(wall - 900.0 - 20.0, node)]) for n, node in enumerate("ab")],
                       wall)
        live.caught_up(wall if k == 60 else wall - 20.0)
        if k >= 60:  # event time follows the reads all along
            assert live.watermark == wall - 900.0 - 20.0 - 0.5


def test_after_a_blind_spell_a_detector_behind_waits_rejoin_s_from_when_it_knows() -> None:
    """A detector 15 s behind learns that the broker is back 15 s after it was: the producers'
    backlog is still ahead of it, so event time waits rejoin_s from then, not from the moment
    confirmed (by then 5 s past: no wait at all)."""
    live = LiveDetector(Recording(), LiveConfig(lateness_s=0.5, idle_s=2.0, blind_s=3.0, rejoin_s=10.0,
                                                release_every_s=0.0))
    live.watch_reads()
    wall = 1000.0
    for k in range(240):  # 60 s; reads 15 s behind; no confirmation between 1020 and 1035
        wall = 1000.0 + k / 4
        live.feed_many([(("node", n), [beat(wall - 900.0 - 15.0, node)]) for n, node in enumerate("ab")],
                       wall)
        if not 1020.0 <= wall < 1035.0:
            live.caught_up(wall - 15.0)
        if wall == 1034.0:
            held = live.watermark  # blind since 1023
        if wall == 1044.75:  # 9.75 s after it knew
            assert live.watermark == held
    assert live.watermark == wall - 900.0 - 15.0 - 0.5
