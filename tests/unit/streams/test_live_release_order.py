"""LiveDetector: what it holds is released at the watermark in ts then arrival order, the watermark
never goes back, and past `order_at` what arrives ahead of the slowest partition waits unfed."""

from __future__ import annotations

import random

import pytest

import trainmedic.schemas as s
from tests.unit.streams.live_feed import Recording, beat
from trainmedic.streams.core import Detector
from trainmedic.streams.live import LiveConfig, LiveDetector


def test_a_full_buffer_releases_its_oldest_events() -> None:
    live = LiveDetector(Detector(), LiveConfig(max_buffered=10))
    # One partition races ahead while another holds the watermark back.
    live.feed(s.NodeHeartbeat(ts=0.0, node="slow", interval=1.0), ("node", 1), 0.0)
    for t in range(30):
        live.feed(s.NodeHeartbeat(ts=float(t), node="fast", interval=1.0), ("node", 0), 0.1)
    assert live.buffered == 10
    assert live.forced == 21  # 31 events in, the newest 10 held


def fed_at_random(live: LiveDetector, rng: random.Random, count: int, wall: float, check) -> float:
    """About `count` heartbeats from 4 partitions, ts on and next to bucket edges, many equal, fed
    a fetch at a time (1 to 3 runs of 1 to 7 events); `check` after each fetch, with its events in
    arrival order."""
    n = 0
    while n < count:
        runs = []
        for _ in range(rng.randint(1, 3)):
            run = []
            for _ in range(rng.randint(1, 7)):
                ts = round(rng.uniform(0, 3), rng.choice([1, 2, 3, 6])) + rng.choice([0.0, 1e-9, -1e-9])
                event = s.NodeHeartbeat.model_construct(ts=max(ts, 0.0), node=f"n{n}", interval=1.0)
                run.append((event.ts, event, None))
                n += 1
            runs.append((("node", rng.randrange(4)), run))
        wall += 0.001
        live.feed_many(runs, wall)
        check([event for _, run in runs for _, event, _ in run])
    return wall


@pytest.mark.parametrize("max_buffered", [500_000, 40, 5])
def test_each_release_is_what_is_due_in_ts_then_arrival_order(max_buffered: int) -> None:
    """Against a sort of everything held by (ts, arrival): each fetch releases exactly the held
    events at or before the watermark, then (a full buffer) the oldest of the others."""
    live = LiveDetector(Recording(), LiveConfig(lateness_s=0.05, release_every_s=0.0,
                                                max_buffered=max_buffered))
    held: list[tuple] = []
    arrived = 0

    def check(events: list) -> None:
        nonlocal held, arrived
        for event in events:
            held.append((event.ts, arrived, event))
            arrived += 1
        held.sort(key=lambda entry: entry[:2])
        due = [entry for entry in held if entry[0] <= live.watermark]
        early = held[len(due):][:max(0, len(held) - len(due) - max_buffered)]
        released = live.detector.seen[-len(due + early):] if due + early else []
        assert [id(e) for e in released] == [id(entry[2]) for entry in due + early]
        held = held[len(due + early):]
        assert live.buffered == len(held)

    fed_at_random(live, random.Random(7), 3_000, 0.0, check)
    assert live.forced > 0 if max_buffered < 500_000 else live.forced == 0


def test_a_fetch_is_held_whole_before_the_watermark_moves() -> None:
    """One partition's run spans seconds of event time, another partition's first event comes later
    in the same fetch: it is not late, all is released in ts order."""
    live = LiveDetector(Recording(), LiveConfig(lateness_s=0.5, release_every_s=0.0))
    beat = lambda ts, node: (ts, s.NodeHeartbeat.model_construct(ts=ts, node=node, interval=1.0), None)  # noqa: E731
    live.feed_many([(("node", 0), [beat(10.0, "a")])], 0.5)
    live.feed_many([(("node", 0), [beat(10.0 + k / 10, "a") for k in range(1, 21)]),
                    (("node", 1), [beat(10.2, "b")])], 1.0)
    for n in range(1, 20):
        live.tick(1.0 + n * 0.25)
    seen = [event.ts for event in live.detector.seen]
    assert len(seen) == 22 and seen == sorted(seen)


def test_held_events_resume_in_the_order_they_would_have_been_released() -> None:
    rng = random.Random(3)
    live = LiveDetector(Recording(), LiveConfig(lateness_s=0.5))
    wall = fed_at_random(live, rng, 500, 0.0, lambda event: None)
    held = live.buffered
    assert held > 50
    resumed = LiveDetector(Recording(), LiveConfig(lateness_s=0.5))
    resumed.resume(live.watermark, list(reversed(live.held())), live.sources(wall), wall)
    for each in (live, resumed):
        for n in range(1, 40):
            each.tick(wall + n * 0.25)
    assert resumed.buffered == live.buffered == 0
    assert [id(e) for e in resumed.detector.seen] == [id(e) for e in live.detector.seen[-held:]]


def test_the_watermark_never_goes_back() -> None:
    live = LiveDetector(Detector(), LiveConfig(lateness_s=0.5))
    live.feed(s.NodeHeartbeat(ts=10.0, node="a", interval=1.0), ("node", 0), 0.0)
    assert live.watermark == 9.5
    live.feed(s.NodeHeartbeat(ts=3.0, node="b", interval=1.0), ("node", 1), 0.1)
    assert live.watermark == 9.5


def test_arrivals_update_the_watermark_at_most_every_release_interval() -> None:
    live = LiveDetector(Detector(), LiveConfig(lateness_s=0.0, release_every_s=0.01))
    live.feed(s.NodeHeartbeat(ts=1.0, node="a", interval=1.0), ("node", 0), 100.000)
    assert live.watermark == 1.0
    live.feed(s.NodeHeartbeat(ts=2.0, node="a", interval=1.0), ("node", 0), 100.005)
    assert (live.watermark, live.buffered) == (1.0, 1)  # held: too soon after the last update
    live.tick(100.006)  # a tick always updates
    assert (live.watermark, live.buffered) == (2.0, 0)


def test_past_order_at_what_arrives_ahead_of_the_slowest_partition_waits_unfed() -> None:
    live = LiveDetector(Recording(), LiveConfig(lateness_s=0.5, release_every_s=0.0, order_at=3))
    live.expect([("node", 0), ("node", 1)], 0.0)
    live.feed_many([(("node", 0), [beat(10.0 + k, "a") for k in range(3)])], 0.1)  # under order_at: held
    live.feed_many([(("node", 0), [beat(13.0 + k, "a") for k in range(5)])], 0.2)  # past it: they wait
    assert (live.buffered, live.waiting(), live.detector.seen) == (8, {("node", 0): 5}, [])
    assert [entry[0] for entry in live.held_entries()] == [10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0]
    live.feed_many([(("node", 1), [beat(11.0, "b"), beat(14.0, "b")])], 0.3)  # the slowest catches up
    assert live.waiting() == {("node", 0): 3}  # 13 and 14 fed (up to AHEAD_S past 14), 15-17 wait
    assert [e.ts for e in live.detector.seen] == [10.0, 11.0, 11.0, 12.0, 13.0]  # up to 14 - lateness
    assert set(live.holding(0.3)) == {("node", 0), ("node", 1)}
    for n in range(1, 20):  # quiet: node 1 goes idle, so what waited for it is fed and released
        live.tick(0.3 + n * 0.25)
    assert live.waiting() == {} and live.buffered == 0 and live.forced == 0
    seen = [e.ts for e in live.detector.seen]
    assert seen == sorted(seen) and len(seen) == 10


def test_a_source_with_events_waiting_holds_event_time_back_however_quiet() -> None:
    live = LiveDetector(Recording(), LiveConfig(lateness_s=0.5, release_every_s=0.0, order_at=1, idle_s=2.0))
    live.watch_reads()
    live.feed_many([(("node", 1), [beat(10.0, "b")])], 0.0)
    live.feed_many([(("node", 0), [beat(20.0, "a"), beat(21.0, "a")])], 0.0)  # far ahead: they wait
    for n in range(1, 13):  # node 0 is quiet and read to its end for 3 s; node 1 delivers, slowly
        live.caught_up(n * 0.25)
        live.feed_many([(("node", 1), [beat(10.0 + n / 100, "b")])], n * 0.25)
    assert live.waiting() == {("node", 0): 2}
    assert live.holding(3.0)[("node", 0)] == 20.0 and live.watermark == 10.12 - 0.5
    assert all(e.ts < 20.0 for e in live.detector.seen)


def test_a_partition_read_to_its_end_goes_quiet_while_the_engine_reads_no_other() -> None:
    """The slowest partition has nothing more; the one ahead, with events waiting, is paused. Reads
    confirmed for all but the paused one let the slowest go quiet, so what waited is fed."""
    live = LiveDetector(Recording(), LiveConfig(lateness_s=0.5, release_every_s=0.0, order_at=1, idle_s=2.0))
    live.watch_reads()
    live.feed_many([(("node", 1), [beat(10.0, "b")])], 0.0)
    live.feed_many([(("node", 0), [beat(20.0, "a"), beat(21.0, "a")])], 0.0)  # far ahead: they wait
    for n in range(1, 13):
        live.read_through(n * 0.25, frozenset({("node", 1)}))  # read to its end; node 0 not asked
        live.tick(n * 0.25)
    assert live.waiting() == {} and [e.ts for e in live.detector.seen] == [10.0, 20.0]
    assert live.blind_for == float("inf")  # no read confirmed whole: that says nothing of blindness


def test_one_event_far_ahead_does_not_keep_its_partitions_others_waiting() -> None:
    """A node whose clock runs 5 s fast shares a partition with on-time nodes: what comes behind
    its event is fed in order with it, not kept until the slowest partition reaches its time."""
    live = LiveDetector(Recording(), LiveConfig(lateness_s=0.5, release_every_s=0.0, order_at=1))
    live.feed_many([(("node", 1), [beat(10.0, "b")])], 0.0)
    arrived = [beat(10.1, "a"), beat(15.2, "fast"), beat(10.3, "a"), beat(10.4, "c")]
    live.feed_many([(("node", 0), arrived)], 0.0)
    assert live.waiting() == {}  # all four fed: 15.2 is held, 10.3 and 10.4 are not kept behind it
    live.feed_many([(("node", 1), [beat(11.0, "b")])], 0.1)
    assert [e.ts for e in live.detector.seen] == [10.0, 10.1, 10.3, 10.4]
