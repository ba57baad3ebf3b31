"""Small builders of telemetry for the detector's unit tests (ranks r live on node n{r // 2})."""

from __future__ import annotations

from trainmedic.schemas.telemetry import (
    GpuSample,
    LinkState,
    NodeHeartbeat,
    WorkerExited,
    WorkerFailed,
    WorkerStarted,
    WorkerStepped,
)
from trainmedic.streams.core import Detector

WORLD = 8
NODES = [f"n{i}" for i in range(WORLD // 2)]


def node_of(rank: int) -> str:
    return f"n{rank // 2}"


def hb(ts: float, node: str = "n0", interval: float = 1.0, links: dict | None = None):
    return NodeHeartbeat(ts=ts, node=node, interval=interval,
                         links=tuple(LinkState(name=k, up=v) for k, v in (links or {}).items()))


def gpu(ts: float, node: str = "n0", index: int = 0, **fields):
    return GpuSample(ts=ts, node=node, gpu=index, **fields)


def _worker(kind, ts, rank, job, gen, **fields):
    return kind(ts=ts, node=fields.pop("node", node_of(rank)), job=job, rank=rank,
                world_size=WORLD, generation=gen, **fields)


def start(ts, rank, job="j", gen=0, **f):
    return _worker(WorkerStarted, ts, rank, job, gen, **f)


def step(ts, rank, n, took=1.0, job="j", gen=0, **f):
    return _worker(WorkerStepped, ts, rank, job, gen, step=n, step_time=took, **f)


def error(ts, rank, text, job="j", gen=0, **f):
    return _worker(WorkerFailed, ts, rank, job, gen, error=text, **f)


def exited(ts, rank, code=1, signal=None, job="j", gen=0, **f):
    return _worker(WorkerExited, ts, rank, job, gen, exit_code=code, signal=signal, **f)


def healthy(t0: float, t1: float, *, nodes=NODES, gpus: int = 2, silent=(), dead=()):
    """Heartbeats and GPU samples every second from t0 to t1, except GPUs in `silent`
    ((node, gpu) pairs) and nodes in `dead`."""
    out, t = [], t0
    while t < t1:
        for node in nodes:
            if node in dead:
                continue
            out.append(hb(t + 0.01, node))
            out += [gpu(t + 0.02, node, g, ecc_dbe=0, nvlink_errors=0) for g in range(gpus)
                    if (node, g) not in silent]
        t += 1.0
    return out


def steps(t0: float, t1: float, *, first=0, took=1.0, ranks=range(WORLD), job="j", gen=0,
          factor: dict | None = None):
    """Every rank steps once per `took` seconds from t0 until t1."""
    out, t, n = [], t0, first
    while t < t1:
        out += [step(t + 0.001 * r, r, n, took * (factor or {}).get(r, 1.0), job, gen)
                for r in ranks]
        t, n = t + took, n + 1
    return out


def run(events, detector: Detector | None = None, drain: bool = True):
    """Feed events in ts order (stably); the incidents emitted, and the detector."""
    detector = detector or Detector()
    out = []
    for event in sorted(events, key=lambda e: e.ts):
        out += detector.observe(event)
    if drain:
        out += detector.drain()
    return out, detector


def opened(incidents):
    return [i for i in incidents if i.status == "open"]
