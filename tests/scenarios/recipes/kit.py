"""What the scenario recipes share: the registry, the expected incident, the opening nearly every
scenario has, and the ways ranks and GPUs fail."""

from __future__ import annotations

import random
from collections.abc import Callable

from sim import T0, Cluster, Job

from recipes.error_texts import NCCL_PEER

Tweak = Callable[[str, int, float, dict], None]
SCENARIOS: dict[str, Callable[[random.Random], dict]] = {}


def scenario(fn: Callable[[random.Random], dict]) -> Callable[[random.Random], dict]:
    """Register a recipe under its name; its docstring's first paragraph is the scenario's description."""
    SCENARIOS[fn.__name__] = fn
    return fn


def recording(c: Cluster, *incidents: dict, **more) -> dict:
    """What a recipe returns: the cluster's events and the incidents replay must emit, in order."""
    return {"events": c.events, "incidents": list(incidents), **more}


def expect(status: str, category: str, severity: str, node: str | None, job: str | None,
           fault: float | None = None, max_delay_s: float | None = None, **more) -> dict:
    """An incident replay must emit; with `fault` (seconds into the recording), it must open within
    `max_delay_s` of it."""
    action = {"SEV1": "reconfigure", "SEV2": "restart", "SEV3": "reattempt", "WARN": "alert"}
    item = {"status": status, "category": category, "severity": severity,
            "action": action[severity], "node": node, "job": job}
    if fault is not None:
        item["fault_ts"] = round(T0 + fault, 3)
        item["max_delay_s"] = max_delay_s
    return {**item, **more}


def running(rng: random.Random, seconds: float, *, links: Callable[[str, float], bool] | None = None,
            tweak: Tweak | None = None, dead: dict[str, tuple[float, float]] | None = None,
            start_at: float | None = 0.5, **job) -> tuple[Cluster, Job]:
    """The opening: every node's heartbeats and GPU samples for `seconds` (none from a node in its
    `dead` span), then job-a's ranks start at `start_at` (None: the recipe starts them itself)."""
    c = Cluster(rng, dead=dict(dead or {}))
    c.heartbeats(0, seconds, links=links)
    c.gpu_samples(0, seconds, tweak=tweak)
    first = Job(c, **job)
    if start_at is not None:
        first.start(start_at)
    return c, first


def restart(c: Cluster, at: float, until: float, gen: int = 1, **job) -> Job:
    """Generation `gen` of job-a starts at `at` and steps from a second later until `until`."""
    again = Job(c, gen=gen, **job)
    again.start(at)
    again.run(at + 1, until)
    return again


def crash(job: Job, t: float, ranks: list[int], error: str | None, peers_at: float,
          peer_error: str = NCCL_PEER, **how) -> None:
    """`ranks` fail with `error` (exiting `how`) from `t`; every other rank reports `peer_error` from
    `peers_at`, as the collective it waits in breaks."""
    job.fail(t, ranks, error, **how)
    job.fail(peers_at, [rank for rank in range(job.world) if rank not in ranks], peer_error)


def gpu_fault(node: str, gpu: int, since: float, until: float = float("inf"), **fields) -> Tweak:
    """A GPU tweak: from `since` until `until` its samples carry `fields` (no fields: it sends none)."""
    def tweak(n: str, g: int, t: float, sample: dict) -> None:
        if (n, g) == (node, gpu) and since <= t < until:
            if fields:
                sample.update(fields)
            else:
                sample.clear()
    return tweak


def xid_at(node: str, gpu: int, after: float, xids: list[int], then_silent: bool = False) -> Tweak:
    """A GPU tweak: the first sample after `after` carries the Xids (and, optionally, none
    follow: the GPU fell off the bus)."""
    def tweak(n: str, g: int, t: float, sample: dict) -> None:
        if (n, g) == (node, gpu) and t >= after:
            if t < after + 1.0:
                sample["xids"] = xids
            elif then_silent:
                sample.clear()
    return tweak
