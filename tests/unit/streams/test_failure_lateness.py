"""A rank's failure report waits `failure_lateness_s`, not `lateness_s`, when set below it: the incident
a killed rank's exit settles is out once reads are known complete that far past the exit
(docs/streams.md, "A failure report may wait less")."""

from __future__ import annotations

import trainmedic.schemas as s
from trainmedic.streams.core import Detector
from trainmedic.streams.live import LiveConfig, LiveDetector

WORKER, NODE = ("telemetry.worker", 0), ("telemetry.node", 0)


def worker(kind, ts: float, **fields):
    return kind(ts=ts, node="n0", job="j", rank=0, world_size=1, generation=0, **fields)


def after_the_kill(less: float, read_s: float) -> list[str]:
    """A one-rank job killed (-9) at ts 10.0: the incidents out once reads are known complete
    `read_s` after the exit was read (wall 100.0 is ts 10.0, every producer's clock the same)."""
    live = LiveDetector(Detector(), LiveConfig(lateness_s=0.5, failure_lateness_s=less, release_every_s=0.0))
    live.watch_reads()
    out = []
    for ts in (9.0, 9.5):
        wall = 90.0 + ts
        events = [worker(s.WorkerStarted, ts)] if ts == 9.0 else [worker(s.WorkerStepped, ts, step=1,
                                                                          step_time=0.5)]
        out += live.feed_many([(WORKER, [(e.ts, e, None) for e in events]),
                               (NODE, [(ts, s.NodeHeartbeat(ts=ts, node="n1", interval=1.0), None)])], wall)
        live.caught_up(wall)
    out += live.feed(worker(s.WorkerExited, 10.0, exit_code=None, signal=9), WORKER, 100.0)
    live.caught_up(100.0 + read_s)
    out += live.tick(100.0 + read_s)
    return [incident.category for incident in out]


def test_a_killed_rank_s_incident_waits_failure_lateness_not_lateness() -> None:
    assert after_the_kill(0.05, 0.06) == ["process_exit"]
    assert after_the_kill(0.05, 0.04) == []  # reads not yet known complete 0.05 s past the exit
    assert after_the_kill(0.5, 0.06) == []  # as any event: lateness_s, 0.5 s
    assert after_the_kill(0.5, 0.51) == ["process_exit"]
