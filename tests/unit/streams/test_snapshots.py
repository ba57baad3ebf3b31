"""Saving and restoring the detector's state: encoding, cadence, and a state too big to save."""

from __future__ import annotations

import asyncio

import pytest

import schemas as s
import streams.snapshots as snapshots_module
from streams.core import Detector
from streams.live import LiveDetector
from streams.snapshots import STATE_KEY, Snapshots, decode_state, encode_state


class Changelog:
    declared = 0

    async def declare(self) -> None:
        self.declared += 1


class Table(dict):
    """The few operations of a Faust table that snapshots use."""

    def __init__(self) -> None:
        super().__init__()
        self.changelog_topic = Changelog()


def fed(beats: int) -> LiveDetector:
    live = LiveDetector(Detector())
    for t in range(beats):
        live.feed(s.NodeHeartbeat(ts=100.0 + t, node="n1", interval=1.0), ("node", 0), 1000.0 + t)
    return live


def test_the_state_round_trips_through_its_encoding() -> None:
    state = fed(5).detector.state
    assert decode_state(encode_state(state)).to_dict() == state.to_dict()


def test_a_saved_state_is_restored_once_into_a_new_detector() -> None:
    table = Table()
    live = fed(5)
    asyncio.run(Snapshots(table).maybe_save(live, now=0.0))
    assert table.changelog_topic.declared == 1
    fresh = LiveDetector(Detector())
    snaps = Snapshots(table)
    snaps.restore_once(fresh)
    assert fresh.detector.state.clock == live.detector.state.clock > 0
    table.clear()
    snaps.restore_once(fresh)  # only once: a later call changes nothing
    assert fresh.detector.state.clock == live.detector.state.clock


def test_saves_wait_for_their_interval() -> None:
    table = Table()
    snaps = Snapshots(table, base_every_s=1.0)
    asyncio.run(snaps.maybe_save(fed(3), now=10.0))
    del table[STATE_KEY]
    asyncio.run(snaps.maybe_save(fed(6), now=10.5))
    assert STATE_KEY not in table
    asyncio.run(snaps.maybe_save(fed(6), now=11.0))
    assert STATE_KEY in table


def test_nothing_is_saved_while_event_time_stands_still() -> None:
    table = Table()
    live = fed(5)
    snaps = Snapshots(table)
    asyncio.run(snaps.maybe_save(live, now=0.0))
    del table[STATE_KEY]
    asyncio.run(snaps.maybe_save(live, now=100.0))
    assert STATE_KEY not in table


def test_a_state_too_big_to_save_removes_the_stale_snapshot(monkeypatch: pytest.MonkeyPatch) -> None:
    table = Table()
    snaps = Snapshots(table)
    asyncio.run(snaps.maybe_save(fed(3), now=0.0))
    assert STATE_KEY in table
    monkeypatch.setattr(snapshots_module, "MAX_SNAPSHOT_BYTES", 10)
    asyncio.run(snaps.maybe_save(fed(6), now=100.0))
    assert STATE_KEY not in table and snaps.too_big
