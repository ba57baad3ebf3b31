"""Correlation once every rank of a job has reported (`correlation.settle`): no later report can be
more specific, so the group is decided without waiting out its hold, except where a GPU's Xid or a
fault elsewhere could still explain it."""

from __future__ import annotations

from tests.unit.streams.events import gpu, hb, opened, run
from trainmedic.schemas.telemetry import WorkerExited, WorkerFailed, WorkerStarted
from trainmedic.streams.core import Detector, DetectorState

BUG = "ValueError: Expected input batch_size (32) to match target batch_size (31)."
CUDA = "RuntimeError: CUDA error: an illegal memory access was encountered"
NCCL = "torch.distributed.DistBackendError: NCCL error: remote process exited"


def rank(kind, ts: float, r: int, **fields):
    """A report of rank `r` of job j (world size 2; rank 0 on node a, rank 1 on b)."""
    return kind(ts=ts, node="ab"[r], job="j", rank=r, world_size=2, **fields)


def two_nodes(until: float, gpus: int = 0, phase: float = 0.0) -> list:
    """Nodes a and b: heartbeats every second from 0 to `until`, with samples of `gpus` GPUs each
    `phase` later; the job's ranks 0 (on a) and 1 (on b), world size 2, started at 0.5."""
    out = [rank(WorkerStarted, 0.5, r) for r in (0, 1)]
    for t in range(int(until)):
        for node in "ab":
            out.append(hb(t + 0.01, node))
            out += [gpu(t + phase, node, g, ecc_dbe=0) for g in range(gpus)]
    return out


def exits(ts: float, signal: int | None = None) -> list:
    """Both ranks exit, 10 ms apart: by `signal`, or with code 1."""
    code = None if signal else 1
    return [rank(WorkerExited, ts + 0.01 * r, r, exit_code=code, signal=signal) for r in (0, 1)]


def errors(ts: float, text: str) -> list:
    return [rank(WorkerFailed, ts + 0.01 * r, r, error=text) for r in (0, 1)]


def test_a_job_whose_every_rank_exited_is_decided_at_its_last_exit() -> None:
    (incident,) = opened(run(two_nodes(20, gpus=1) + exits(10.3), drain=False)[0])
    assert (incident.category, incident.first_ts, incident.ts) == ("process_exit", 10.3, 10.31)


def test_a_job_whose_every_rank_raised_is_decided_at_its_last_report() -> None:
    events = two_nodes(20, gpus=1) + errors(10.3, BUG) + exits(10.35)
    (incident,) = opened(run(events, drain=False)[0])
    assert (incident.category, incident.ts) == ("software_error", 10.31)  # no Xid explains a ValueError


def test_a_rank_yet_to_report_keeps_the_hold() -> None:
    events = two_nodes(20) + [rank(WorkerExited, 10.3, 0, exit_code=1)]
    (incident,) = opened(run(events, drain=False)[0])
    assert incident.ts == 11.3


def test_exits_by_a_signal_wait_for_the_next_sample_of_the_jobs_gpus_and_its_xid_takes_the_group() -> None:
    events = two_nodes(20, gpus=1, phase=0.6) + exits(10.3, signal=6)
    (incident,) = opened(run(events, drain=False)[0])
    assert incident.ts == 10.6 + 0.1  # the samples at 10.6 were due by 9.6 + 1.1, before the hold's end
    events = two_nodes(20, gpus=1, phase=0.6) + exits(10.3, signal=6) + [gpu(10.6, "b", 0, xids=(79,))]
    (incident,) = opened(run(events, drain=False)[0])
    assert (incident.category, incident.node, incident.first_ts) == ("gpu_lost", "b", 10.3)


def test_a_rank_killed_with_sigkill_is_decided_once_its_peers_reported_whatever_they_said() -> None:
    """No process sends itself a SIGKILL and no GPU fault does (the OOM killer, a person): neither
    the GPUs' next samples nor its peers' broken collectives can explain it better."""
    events = two_nodes(20, gpus=1, phase=0.6) + [rank(WorkerExited, 10.3, 1, signal=9),
                                                 rank(WorkerFailed, 10.32, 0, error=NCCL)]
    (incident,) = opened(run(events, drain=False)[0])
    assert (incident.category, incident.ranks, incident.ts) == ("process_exit", (1,), 10.32)


def test_exits_by_a_signal_keep_the_hold_when_a_gpu_sample_is_late() -> None:
    events = [e for e in two_nodes(20, gpus=1, phase=0.6) if not (e.node == "b" and 10 < e.ts < 11
                                                                  and e.type == "gpu_sample")]
    (incident,) = opened(run(events + exits(10.3, signal=6), drain=False)[0])
    assert incident.ts == 11.3


def test_a_cuda_error_keeps_its_hold_when_every_rank_reported() -> None:
    (incident,) = opened(run(two_nodes(20, gpus=1) + errors(10.3, CUDA), drain=False)[0])
    assert (incident.category, incident.ts) == ("cuda_error", 11.3)


def test_symptoms_keep_their_hold_when_every_rank_reported() -> None:
    (incident,) = opened(run(two_nodes(20) + errors(10.3, NCCL), drain=False)[0])
    assert (incident.category, incident.ts) == ("nccl_error", 12.3)
    reports = [rank(WorkerFailed, 10.3, 0, error=NCCL), rank(WorkerExited, 10.4, 0, exit_code=1),
               rank(WorkerExited, 10.5, 1, exit_code=1)]
    events = two_nodes(20) + reports
    (incident,) = opened(run(events, drain=False)[0])
    assert (incident.category, incident.ts) == ("process_exit", 11.5)  # its peer's error: a fault elsewhere?


def test_a_group_settled_while_awaiting_gpus_carries_on_identically_after_a_restore() -> None:
    events = sorted(two_nodes(20, gpus=1, phase=0.6) + exits(10.3, signal=6), key=lambda e: e.ts)
    whole = run(events, drain=False)[0]
    cut = next(n for n, e in enumerate(events) if e.ts > 10.31)
    first, detector = run(events[:cut], drain=False)
    again = Detector(state=DetectorState.from_dict(detector.state.to_dict()))
    assert first + run(events[cut:], again, drain=False)[0] == whole and len(opened(whole)) == 1
