"""LiveDetector: Kafka's interleaving of topics and partitions does not change the incidents."""

from __future__ import annotations

import random

import pytest

import trainmedic.schemas as s
from tests.unit.streams.test_scenarios import NAMES, load
from trainmedic.streams.core import Detector
from trainmedic.streams.live import LiveConfig, LiveDetector
from trainmedic.streams.replay import replay

PARTITIONS = 3


def source_of(event: s.Event) -> tuple[str, int]:
    """Which topic partition a producer would send this event to (key: node, or job)."""
    if isinstance(event, s.WorkerEvent):
        return ("worker", hash(event.job) % PARTITIONS)
    topic = "gpu" if isinstance(event, s.GpuSample) else "node"
    return (topic, hash(event.node) % PARTITIONS)


def live_run(events: list, seed: int, max_skew_s: float, config: LiveConfig) -> list[s.Incident]:
    """Deliver events as Kafka would: each partition in order, partitions skewed against each
    other by up to `max_skew_s`, a timer tick every 0.25 s; then let the streams go quiet."""
    rng = random.Random(seed)
    skew: dict[tuple[str, int], float] = {}
    arrivals = []
    for order, event in enumerate(sorted(events, key=lambda e: e.ts)):
        source = source_of(event)
        delay = skew.setdefault(source, rng.uniform(0, max_skew_s))
        arrivals.append((event.ts + delay, order, source, event))
    arrivals.sort(key=lambda a: (a[0], a[1]))
    # Within one partition, Kafka keeps the order the producer sent in.
    live = LiveDetector(Detector(), config)
    incidents: list[s.Incident] = []
    next_tick = arrivals[0][0]
    for wall, _, source, event in arrivals:
        while next_tick < wall:
            incidents += live.tick(next_tick)
            next_tick += 0.25
        incidents += live.feed(event, source, wall)
    end = arrivals[-1][0]
    incidents += live.tick(end + config.idle_s + 0.01)
    return incidents


def until(incidents: list[s.Incident], last_ts: float) -> list[tuple]:
    return [(i.id, i.status, i.category, i.severity, i.node, i.job, i.ts)
            for i in incidents if i.ts <= last_ts]


@pytest.mark.parametrize("name", NAMES)
def test_interleaved_delivery_gives_the_incidents_of_replay(name: str) -> None:
    events, _, _ = load(name)
    last_ts = max(e.ts for e in events)
    expected = until(replay(events), last_ts)
    for seed in range(3):
        got = until(live_run(events, seed, max_skew_s=0.4, config=LiveConfig(lateness_s=0.5)), last_ts)
        assert got == expected, f"seed {seed}"


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


def test_a_full_buffer_releases_its_oldest_events() -> None:
    live = LiveDetector(Detector(), LiveConfig(max_buffered=10))
    # One partition races ahead while another holds the watermark back.
    live.feed(s.NodeHeartbeat(ts=0.0, node="slow", interval=1.0), ("node", 1), 0.0)
    for t in range(30):
        live.feed(s.NodeHeartbeat(ts=float(t), node="fast", interval=1.0), ("node", 0), 0.1)
    assert live.buffered == 10
    assert live.forced == 21  # 31 events in, the newest 10 held


class Recording(Detector):
    """A core that only keeps what it observes, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []

    def _apply(self, event) -> None:
        self.seen.append(event)
        self.state.clock = max(self.state.clock, event.ts)


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


BACKLOGS = ["node_lost_gloo", "gpu_lost_xid79", "hang_rank", "nccl_error_timeout"]


@pytest.mark.parametrize("config", [LiveConfig(), LiveConfig(max_buffered=150, order_at=40)],
                         ids=["default", "small buffer"])
@pytest.mark.parametrize("name", BACKLOGS)
def test_a_backlog_read_a_partition_at_a_time_gives_the_incidents_of_replay(name: str,
                                                                             config: LiveConfig) -> None:
    """At start the detector may read a backlog: the whole of one partition, then the next. The
    partitions it expects hold event time back until each has delivered. With more than `order_at`
    held, what arrives ahead of the slowest partition waits: a buffer far smaller than the backlog
    is never full (released early, out of order, some of these open false incidents)."""
    events, _, _ = load(name)
    last_ts = max(e.ts for e in events)
    backlog: dict[tuple, list] = {}
    for event in sorted(events, key=lambda e: e.ts):
        backlog.setdefault(source_of(event), []).append(event)
    assert len(events) > 4 * config.max_buffered or config.max_buffered == LiveConfig().max_buffered
    live = LiveDetector(Detector(), config)
    live.expect(list(backlog), wall=0.0)
    incidents, wall = [], 0.1
    for source, arrived in sorted(backlog.items()):
        for event in arrived:
            wall += 20e-6  # as fast as the detector takes them: watermark updates every 10 ms
            incidents += live.feed(event, source, wall)
    for n in range(1, 10):  # then everything is quiet (ticks every 0.25 s, as engines do)
        incidents += live.tick(wall + n * 0.25)
    assert until(incidents, last_ts) == until(replay(events), last_ts)
    assert live.forced == 0


def beat(ts: float, node: str) -> tuple:
    return ts, s.NodeHeartbeat.model_construct(ts=ts, node=node, interval=1.0), None


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
