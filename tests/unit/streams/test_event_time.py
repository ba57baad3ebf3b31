"""Time is the broker's: the one clock bound (streams/event_time.py) and every engine's use of it:
the pipeline's two paths (both engines, the ingest stage) and the sharded decider."""

from __future__ import annotations

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Message

import trainmedic.schemas as s
from trainmedic.bus.message import RawMessage
from trainmedic.schemas.topics import BY_SUFFIX
from trainmedic.streams.checkpoints.contents import decode_checkpoint, encode_checkpoint
from trainmedic.streams.core import Detector
from trainmedic.streams.engines.batches import Batch, Entry, SourceOffsets, decode_batch, encode_batch
from trainmedic.streams.engines.decide_stage import new_events
from trainmedic.streams.engines.ingest_stage import wire_event
from trainmedic.streams.event_time import ClockBound
from trainmedic.streams.live import LiveConfig, LiveDetector
from trainmedic.streams.pipeline import Pipeline

TOPICS = s.Topics("mem.")
NOW = 1_800_000_000.0
HOUR = 3600.0
BOUND = ClockBound(ahead_s=5.0, behind_s=300.0)


def test_telemetry_topics_are_created_with_the_brokers_clock() -> None:
    for suffix in ("telemetry.gpu", "telemetry.node", "telemetry.worker", "acks"):
        assert BY_SUFFIX[suffix].config()["message.timestamp.type"] == "LogAppendTime"
        assert BY_SUFFIX[suffix].enforced() == {"message.timestamp.type": "LogAppendTime"}
    assert BY_SUFFIX["incidents"].enforced() == {}


@pytest.mark.parametrize(("ts", "stamped", "wall"), [
    (NOW, NOW, NOW),
    (NOW + 5.0, NOW, NOW),  # at the bound: still believed
    (NOW - 300.0, NOW, NOW),
    (NOW - HOUR, NOW - HOUR, NOW),  # an old message read now (a backlog): late, not skewed
    (NOW + 4.0, None, NOW),  # no stamp: the wall clock alone bounds it
    (NOW + 4.0, -0.001, NOW),  # librdkafka's "no timestamp" (-1 ms)
])
def test_a_ts_within_the_bounds_is_believed(ts: float, stamped: float | None, wall: float) -> None:
    assert BOUND.within(ts, stamped, wall) and BOUND.judge(ts, stamped, wall) is None


def test_a_ts_ahead_of_its_brokers_stamp_is_refused() -> None:
    skewed = BOUND.judge(NOW + HOUR, NOW, NOW + HOUR)  # even were the detector's clock as far ahead
    assert (skewed.direction, skewed.used_at) == ("ahead", None)
    assert skewed.reason == ("clock_skew: ts 1800003600.000 is 3600.0 s ahead of its message's broker "
                             "timestamp 1800000000.000 (max_ahead_s 5): not used")
    assert BOUND.judge(NOW + 5.01, NOW, NOW + 10).used_at is None


@pytest.mark.parametrize("stamped", [None, NOW + HOUR])
def test_a_ts_ahead_of_the_detectors_clock_is_refused_whatever_the_stamp(stamped: float | None) -> None:
    """A topic still stamped by its producers (CreateTime) lets a forger stamp the message an hour
    ahead too: the detector's own clock still refuses it."""
    skewed = BOUND.judge(NOW + HOUR, stamped, NOW)
    assert (skewed.direction, skewed.used_at) == ("ahead", None)
    assert skewed.reason.startswith("clock_skew: ts 1800003600.000 is 3600.0 s ahead of the detector's clock")


def test_a_ts_far_behind_its_stamp_is_used_at_the_stamp_unless_the_stamp_is_ahead_of_the_clock() -> None:
    skewed = BOUND.judge(1.0, NOW, NOW)
    assert (skewed.direction, skewed.used_at) == ("behind", NOW)
    assert skewed.reason.startswith("clock_skew: ") and "used at the timestamp" in skewed.reason
    forged = BOUND.judge(NOW, NOW + HOUR, NOW)  # an honest-looking ts, a stamp an hour ahead
    assert (forged.direction, forged.used_at) == ("behind", None) and forged.reason.endswith("not used")
    assert BOUND.judge(NOW, 2.0**62 / 1000, NOW).used_at is None  # past any valid time


def beat(ts: float, node: str) -> bytes:
    return s.encode(s.NodeHeartbeat(ts=ts, node=node, interval=1.0))


def letters(out: list) -> list[s.DeadLettered]:
    return [s.decode(o.value, s.adapter("dlq")) for o in out if o.topic == TOPICS.dlq]


def test_an_hour_ahead_heartbeat_is_dead_lettered_and_never_moves_event_time() -> None:
    """The attack of issue 32: healthy nodes' telemetry an hour ahead. Before, each was used at its
    message's stamp, which the forger sets too on a producer-stamped topic; now it is not used."""
    run = Pipeline(TOPICS, LiveDetector(Detector(), LiveConfig(lateness_s=0.0)))
    out = []
    for n in range(20):
        wall = NOW + n * 0.5
        for node in ("n0", "n1"):
            out += run.on_message(RawMessage(TOPICS.node, 0, 2 * n, int(wall * 1000), node.encode(),
                                             beat(wall, node)), wall)
        out += run.on_message(RawMessage(TOPICS.node, 1, n, int((wall + HOUR) * 1000), b"n0",
                                         beat(wall + HOUR, "n0")), wall)  # stamped by the forger too
        out += run.on_tick(wall)
    dead = letters(out)
    assert [(d.source_topic, d.partition) for d in dead] == [(TOPICS.node, 1)] * 20
    assert all(d.reason.startswith("clock_skew: ts ") and "ahead of the detector's clock" in d.reason
               for d in dead)
    assert not [o for o in out if o.topic == TOPICS.incidents]
    assert run.live.watermark < NOW + 10
    assert run.live.detector.state.nodes["n0"].last_seen == NOW + 9.5


def test_a_slow_clocks_event_held_in_a_checkpoint_comes_back_at_its_message_time() -> None:
    run = Pipeline(TOPICS, LiveDetector(Detector(), LiveConfig(lateness_s=5.0)))
    [out] = run.on_message(RawMessage(TOPICS.node, 0, 0, int(NOW * 1000), b"n1", beat(NOW - HOUR, "n1")), NOW)
    assert letters([out])[0].reason.startswith("clock_skew: ")
    [held] = run.live.held()
    assert held.event.ts == NOW
    [restored] = decode_checkpoint(encode_checkpoint(run.live, {(TOPICS.node, 0): 1}, NOW)).held
    assert restored.event.ts == NOW


def test_the_consumer_engines_fast_path_bounds_clocks_as_check_does() -> None:
    """`on_fetch` inlines `ClockBound.within`: each message, alone, is taken as `on_messages` takes it."""
    cases = [(NOW, NOW), (NOW + 5.0, NOW), (NOW + 5.5, NOW), (NOW + 5.5, None), (NOW - 299.0, NOW),
             (NOW - 301.0, NOW), (NOW + HOUR, NOW + HOUR), (NOW, NOW + HOUR), (NOW + 4.0, NOW + 8.0)]
    for n, (ts, stamped) in enumerate(cases):
        stamp = -1 if stamped is None else int(stamped * 1000)
        raw = RawMessage(TOPICS.node, 0, n, stamp, b"n", beat(ts, "n"))
        fetched = Message(topic=raw.topic, partition=0, offset=n, key=raw.key, value=raw.value,
                          timestamp=(TIMESTAMP_LOG_APPEND_TIME, stamp))
        ways = []
        for way in ("messages", "fetch"):
            run = Pipeline(TOPICS, LiveDetector(Detector(), LiveConfig(lateness_s=1.0)))
            out = (run.on_messages([raw], NOW) if way == "messages"
                   else run.on_fetch([fetched], NOW, {}, pytest.fail))
            ways.append((out, run.stats, [(h.event, h.origin) for h in run.live.held()]))
        assert ways[0] == ways[1], (ts, stamped)
        assert bool(letters(ways[0][0])) == (BOUND.judge(ts, stamped, NOW) is not None)


def test_the_ingest_stage_bounds_clocks_with_the_bound_it_is_given() -> None:
    ingest = Pipeline(TOPICS, None, max_skew_s=300.0, max_ahead_s=2.0)
    message = RawMessage(TOPICS.node, 0, 0, int(NOW * 1000), b"n", beat(NOW + 3, "n"))
    event, _, dead = ingest.check(message, NOW)
    assert event is None and "(max_ahead_s 2)" in letters(dead)[0].reason
    assert Pipeline(TOPICS, None).bound == ClockBound(5.0, 300.0)  # LiveConfig's defaults


def test_the_decider_refuses_what_is_ahead_of_its_own_clock() -> None:
    """Ingest checked each event at its own clock; the decider bounds event time by its own."""
    events = [wire_event(s.NodeHeartbeat(ts=ts, node="n", interval=1.0)) for ts in (NOW, NOW + 60.0)]
    entries = [Entry(n, int(NOW * 1000) + n, b"n", event) for n, event in enumerate(events)]
    batch = decode_batch(encode_batch(Batch(TOPICS.node, 0, 0, 2, entries)))
    held, dead = new_events(SourceOffsets(), batch, TOPICS.dlq, NOW, BOUND)
    assert [(ts, origin.offset) for ts, _, origin in held] == [(NOW, 0)]
    [letter] = letters(dead)
    assert letter.offset == 1 and "ahead of the detector's clock" in letter.reason
