"""A rank's first failure report waits `failure_lateness_s`, not `lateness_s`, when set below it: the
incident a killed rank's exit settles is out once reads are known complete that far past the exit
(docs/streams.md, "A failure report may wait less"). A rank's later reports, and reports about a job
the detector never saw started, wait as any event: no job sets how long the others' evidence waits."""

from __future__ import annotations

import msgspec
import pytest

import trainmedic.schemas as s
from trainmedic.schemas import wire
from trainmedic.streams.core import Detector
from trainmedic.streams.live import LiveConfig, LiveDetector

WORKER, NODE = ("telemetry.worker", 0), ("telemetry.node", 0)


def worker(kind, ts: float, rank: int = 0, node: str = "n0", job: str = "j", **fields):
    return kind(ts=ts, node=node, job=job, rank=rank, world_size=2, generation=0, **fields)


def twin(event) -> object:
    """The event as the consumer engine decodes it: its msgspec twin (schemas/wire.py)."""
    return wire.fast_decoder.decode(msgspec.json.encode(event.model_dump(mode="json")))


def started(less: float) -> LiveDetector:
    """Job j, ranks 0 (node n0) and 1 (n1), stepping; every event read as it was stamped (every clock the
    same), reads known complete up to 9.5."""
    live = LiveDetector(Detector(), LiveConfig(lateness_s=0.5, failure_lateness_s=less, release_every_s=0.0))
    live.watch_reads()
    for ts in (9.0, 9.5):
        wall = ts
        events = ([worker(s.WorkerStarted, ts, rank=r, node=f"n{r}") for r in (0, 1)] if ts == 9.0 else
                  [worker(s.WorkerStepped, ts, rank=r, node=f"n{r}", step=1, step_time=0.5) for r in (0, 1)])
        live.feed_many([(WORKER, [(e.ts, e, None) for e in events]),
                        (NODE, [(ts, s.NodeHeartbeat(ts=ts, node="n2", interval=1.0), None)])], wall)
        live.caught_up(wall)
    return live


def released(live: LiveDetector, report, read_s: float) -> bool:
    """Whether `report`, read as it was stamped, is fed to the core once reads are known complete
    `read_s` later."""
    wall = report.ts
    live.feed(report, WORKER, wall)
    live.caught_up(wall + read_s)
    live.tick(wall + read_s)
    return live.watermark >= report.ts


def after_the_kill(less: float, read_s: float) -> list[str]:
    """Both ranks killed (-9) at ts 10.0 (the job's every rank reported: settled at once): the
    incidents out once reads are known complete `read_s` after the exits were read."""
    live = started(less)
    exits = [twin(worker(s.WorkerExited, 10.0, rank=r, node=f"n{r}", exit_code=None, signal=9))
             for r in (0, 1)]
    out = live.feed_many([(WORKER, [(e.ts, e, None) for e in exits])], 10.0)
    live.caught_up(10.0 + read_s)
    out += live.tick(10.0 + read_s)
    return [incident.category for incident in out]


def test_a_killed_rank_s_incident_waits_failure_lateness_not_lateness() -> None:
    assert after_the_kill(0.05, 0.06) == ["process_exit"]
    assert after_the_kill(0.05, 0.04) == []  # reads not yet known complete 0.05 s past the exit
    assert after_the_kill(0.5, 0.06) == []  # as any event: lateness_s, 0.5 s
    assert after_the_kill(0.5, 0.51) == ["process_exit"]


def test_only_a_rank_s_first_failure_report_of_its_job_s_generation_waits_less() -> None:
    live = started(0.05)
    error = worker(s.WorkerFailed, 10.0, error="RuntimeError: boom")
    assert released(live, twin(error), 0.06)  # rank 0's first: fed 0.05 s past it
    again = worker(s.WorkerFailed, 11.0, error="RuntimeError: boom")
    assert not released(live, again, 0.06)  # its second: waits lateness_s
    assert released(started(0.05), worker(s.WorkerExited, 10.0, exit_code=1, signal=None), 0.06)
    for report in (worker(s.WorkerFailed, 10.0, job="never-started", error="RuntimeError: x"),
                   worker(s.WorkerFailed, 10.0, rank=1, node="n0", error="RuntimeError: x"),  # not its node
                   worker(s.WorkerFailed, 10.0, error="RuntimeError: x").model_copy(update={"generation": 1}),
                   worker(s.WorkerExited, 10.0, exit_code=0, signal=None),  # a clean end
                   worker(s.WorkerExited, 10.0, exit_code=None, signal=15, stopped=True),  # a planned stop
                   worker(s.WorkerExited, 10.0, exit_code=None, signal=None, reason="adopted")):
        assert not released(started(0.05), report, 0.06), report
    exited = started(0.05)  # rank 0 exited (its incident waits for rank 1): its next report is not news
    assert released(exited, worker(s.WorkerExited, 10.0, exit_code=None, signal=9), 0.06)
    assert not released(exited, worker(s.WorkerFailed, 11.0, error="RuntimeError: after"), 0.06)


def test_a_report_stamped_ahead_of_the_detector_s_clock_waits_as_any_event() -> None:
    """A first failure report stamped 0.5 s after the detector read it (a clock ahead, within
    `max_ahead_s`) would keep event time at the short lateness until then: it waits lateness_s."""
    live = started(0.05)
    live.feed(worker(s.WorkerFailed, 10.5, error="RuntimeError: boom"), WORKER, 10.0)
    live.caught_up(10.06)
    live.tick(10.06)
    assert live.watermark == pytest.approx(10.06 - 0.5)


def test_a_report_with_a_field_the_contract_does_not_know_is_judged_by_its_type() -> None:
    """`exit_code` on an error (the contract model keeps unknown fields): an error, its rank's first;
    no exit's attributes are asked of it."""
    odd = s.WorkerFailed.model_validate({**worker(s.WorkerFailed, 10.0, error="RuntimeError: x").model_dump(),
                                         "exit_code": 1})
    assert released(started(0.05), odd, 0.06)


def test_after_a_checkpoint_s_restore_the_restored_core_is_asked() -> None:
    """A restore puts another core in the live detector (streams/checkpoints/contents.py): that one,
    which knows the job, decides which reports wait less."""
    live = started(0.05)
    restored = LiveDetector(Detector(), live.config)
    restored.watch_reads()
    restored.detector = Detector(live.detector.config, live.detector.state)
    restored.resume(live.watermark, [], live.sources(9.5), 9.5)
    restored.caught_up(9.5)
    assert released(restored, worker(s.WorkerFailed, 10.0, error="RuntimeError: boom"), 0.06)


def test_a_failure_report_moves_no_event_time_while_reads_are_not_known_complete() -> None:
    """A blind spell (no read confirmed for over blind_s), then reads confirmed again: event time
    stays where it was for rejoin_s, failure report held or not."""
    live = started(0.05)
    exit_ = worker(s.WorkerExited, 10.0, exit_code=None, signal=9)
    live.feed(exit_, WORKER, 100.0)
    live.tick(104.0)  # 4 s without a confirmed read
    mark = live.watermark
    live.caught_up(104.0)
    live.tick(104.1)
    assert live.watermark == mark < 10.0
