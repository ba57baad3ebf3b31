"""Checkpoints: state, held events and offsets together, so a restart resumes exactly."""

from __future__ import annotations

import pytest

import schemas as s
from streams.checkpoint import CheckpointError, NewerCheckpoint, decode_checkpoint, encode_checkpoint
from streams.core import Detector
from streams.live import LiveConfig, LiveDetector
from tests.unit.streams.test_live_detector import source_of
from tests.unit.streams.test_scenarios import load

CONFIG = LiveConfig(lateness_s=0.5, release_every_s=0.0)


def arrivals(name: str) -> list[tuple[float, tuple[str, int], s.Event]]:
    """(wall, source, event): the recording in ts order, arriving 0.3 s late, one partition
    (the worker topic) 0.6 s later still, so events wait in the buffer for each other."""
    out = []
    for event in sorted(load(name)[0], key=lambda e: e.ts):
        source = source_of(event)
        out.append((event.ts + (0.9 if source[0] == "worker" else 0.3), source, event))
    return sorted(out, key=lambda a: a[0])


def run(live: LiveDetector, items) -> list[tuple]:
    found = []
    for wall, source, event in items:
        found += live.feed(event, source, wall, origin=(*source, 0, None, s.encode(event)))
    return keys(found)


def keys(incidents: list[s.Incident]) -> list[tuple]:
    return [(i.id, i.status, i.category, i.severity, i.node, i.job, i.ts) for i in incidents]


def restored(live: LiveDetector, wall: float, resumed: float | None = None) -> LiveDetector:
    """A detector started afresh (at `resumed`) from `live`'s checkpoint taken at `wall`."""
    saved = decode_checkpoint(encode_checkpoint(live, {("worker", 0): 17}, wall))
    assert saved.offsets == {("worker", 0): 17}
    fresh = LiveDetector(Detector(live.detector.config, saved.state), CONFIG)
    fresh.resume(saved.watermark, saved.held, saved.sources, wall if resumed is None else resumed)
    return fresh


NAMES = ["node_lost_gloo", "gpu_lost_xid79", "hang_rank", "nccl_error_timeout"]


def cuts(items: list) -> list[int]:
    return [len(items) // 3, len(items) // 2, 2 * len(items) // 3]


@pytest.mark.parametrize("name", NAMES)
def test_a_detector_restored_from_a_checkpoint_decides_as_if_it_never_stopped(name: str) -> None:
    items = arrivals(name)
    expected = run(LiveDetector(Detector(), CONFIG), items)
    assert expected, "the scenario opens an incident"
    for cut in cuts(items):
        first = LiveDetector(Detector(), CONFIG)
        before = run(first, items[:cut])
        assert first.buffered > 0, "the checkpoint is taken with events held"
        assert before + run(restored(first, items[cut - 1][0]), items[cut:]) == expected


DOWNTIME_S = 60.0  # between the checkpoint and the restart: longer than any idle or lateness setting


@pytest.mark.parametrize("name", NAMES)
def test_a_restored_detector_catches_up_on_a_backlog_read_partition_by_partition(name: str) -> None:
    """After a minute down, the rest arrives at once, a partition at a time (as fetches deliver a
    backlog): the restored detector decides as one that never stopped and got the same backlog
    (the time it was down does not count as quiet)."""
    items = arrivals(name)
    for cut in cuts(items):
        backlog: dict[tuple, list] = {}
        for _, source, event in items[cut:]:
            backlog.setdefault(source, []).append(event)
        chunked = [(source, event) for source, events in sorted(backlog.items()) for event in events]
        going, first = LiveDetector(Detector(), CONFIG), LiveDetector(Detector(), CONFIG)
        run(going, items[:cut])
        run(first, items[:cut])
        saved_at = items[cut - 1][0]
        again = restored(first, saved_at, resumed=saved_at + DOWNTIME_S)
        got = run(again, [(saved_at + DOWNTIME_S + 0.1, source, event) for source, event in chunked])
        assert got == run(going, [(saved_at + 0.1, source, event) for source, event in chunked])
        assert keys(again.tick(saved_at + DOWNTIME_S + 120)) == keys(going.tick(saved_at + 120))


@pytest.mark.parametrize("name", NAMES)
def test_a_restored_detector_notices_the_silence_that_follows(name: str) -> None:
    items = arrivals(name)
    for cut in cuts(items):
        going, first = LiveDetector(Detector(), CONFIG), LiveDetector(Detector(), CONFIG)
        run(going, items[:cut])
        run(first, items[:cut])
        saved_at = items[cut - 1][0]
        again = restored(first, saved_at, resumed=saved_at + DOWNTIME_S)
        for t in range(1, 480):  # two minutes of ticks after the restart, nothing arrives
            assert keys(again.tick(saved_at + DOWNTIME_S + t / 4)) == keys(going.tick(saved_at + t / 4))
        assert again.buffered == going.buffered == 0


def test_held_events_fed_without_an_origin_are_saved_re_encoded() -> None:
    live = LiveDetector(Detector(), CONFIG)
    beat = s.NodeHeartbeat(ts=5.0, node="n1", interval=1.0)
    live.feed(beat, ("node", 0), wall=5.0)
    [held] = decode_checkpoint(encode_checkpoint(live, {}, 5.0)).held
    assert (held.event, held.origin) == (beat, None)


def test_a_checkpoint_with_nothing_seen_yet_round_trips() -> None:
    saved = decode_checkpoint(encode_checkpoint(LiveDetector(Detector()), {}, 0.0))
    assert saved.offsets == {} and saved.held == [] and saved.sources == {}
    assert saved.watermark == float("-inf")
    assert saved.state.to_dict() == Detector().state.to_dict()


def test_held_events_keep_where_they_came_from() -> None:
    live = LiveDetector(Detector(), CONFIG)
    raw = b'{"type": "node_heartbeat", "ts": 5, "node": "n1", "interval": 1, "extra": NaN}'
    beat = s.decode(raw, s.adapter("telemetry.node"))
    live.feed(beat, ("node", 2), wall=5.0, origin=("node", 2, 41, "n1", raw))
    [held] = decode_checkpoint(encode_checkpoint(live, {}, 5.0)).held
    assert held.origin == ("node", 2, 41, "n1", raw)  # as it arrived, byte for byte
    assert held.event.node == "n1" and held.seq == 0


def test_a_checkpoint_it_cannot_use_is_refused_with_the_reason() -> None:
    with pytest.raises(CheckpointError, match="not a detector checkpoint"):
        decode_checkpoint(b"garbage")
    with pytest.raises(CheckpointError, match="format None"):
        decode_checkpoint(b'{"x":1}\n')
    with pytest.raises(CheckpointError, match="unreadable: KeyError"):
        decode_checkpoint(b'{"v":1}\n')
    with pytest.raises(CheckpointError, match="format True"):
        decode_checkpoint(b'{"v":true}\n')
    good = encode_checkpoint(LiveDetector(Detector()), {}, 0.0)
    head, _, rest = good.partition(b"\n")
    damaged = rest.replace(b'"nodes":{}', b'"nodes":[]')
    with pytest.raises(CheckpointError, match="unreadable: AttributeError"):
        decode_checkpoint(head + b"\n" + damaged)  # same length: only the shape of `nodes` is wrong
    with pytest.raises(NewerCheckpoint, match="format 99 was written by a newer trainmedic"):
        decode_checkpoint(b'{"v":99}\n')
