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
