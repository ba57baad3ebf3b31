"""Checkpoints: state, held events and offsets together, so a restart resumes exactly."""

from __future__ import annotations

import zlib

import pytest

import schemas as s
from streams.checkpoint import CheckpointError, decode_checkpoint, encode_checkpoint
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
        found += live.feed(event, source, wall)
    return [(i.id, i.status, i.category, i.severity, i.node, i.job, i.ts) for i in found]


def restored(live: LiveDetector) -> LiveDetector:
    """A detector started afresh from `live`'s checkpoint, as the service does it."""
    saved = decode_checkpoint(encode_checkpoint(live, {("worker", 0): 17}))
    assert saved.offsets == {("worker", 0): 17}
    fresh = LiveDetector(Detector(live.detector.config, saved.state), CONFIG)
    fresh.resume(saved.watermark, saved.held)
    return fresh


@pytest.mark.parametrize("name", ["node_lost_gloo", "gpu_lost_xid79", "hang_rank", "nccl_error_timeout"])
def test_a_detector_restored_from_a_checkpoint_decides_as_if_it_never_stopped(name: str) -> None:
    items = arrivals(name)
    expected = run(LiveDetector(Detector(), CONFIG), items)
    assert expected, "the scenario opens an incident"
    for cut in (len(items) // 3, len(items) // 2, 2 * len(items) // 3):
        first = LiveDetector(Detector(), CONFIG)
        before = run(first, items[:cut])
        assert first.buffered > 0, "the checkpoint is taken with events held"
        assert before + run(restored(first), items[cut:]) == expected


def test_a_checkpoint_with_nothing_seen_yet_round_trips() -> None:
    saved = decode_checkpoint(encode_checkpoint(LiveDetector(Detector()), {}))
    assert saved.offsets == {} and saved.held == [] and saved.watermark == float("-inf")
    assert saved.state.to_dict() == Detector().state.to_dict()


def test_a_checkpoint_of_another_version_or_no_checkpoint_at_all_is_refused() -> None:
    with pytest.raises(CheckpointError, match="not a detector checkpoint"):
        decode_checkpoint(b"garbage")
    with pytest.raises(CheckpointError, match="version 99"):
        decode_checkpoint(zlib.compress(b'{"v":99}'))
