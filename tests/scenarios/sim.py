"""A tiny simulated cluster that writes telemetry as EVENTS.md dicts, for scenario recordings.

Times are relative seconds; `T0` is added when events are written. Every generator takes a
seeded Random, so a scenario is the same file every time it is made.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

T0 = 1_700_000_000.0


def node_name(i: int) -> str:
    return f"node-{i:02d}"


def sample_time(node: int, gpu: int, after: float) -> float:
    """When `Cluster.gpu_samples` samples this GPU first at or after `after`."""
    t = 0.11 * node + 0.013 * gpu
    while t < after:
        t += 1.0
    return t


@dataclass
class Cluster:
    """`nodes` hosts with `gpus` GPUs each; `dead[node] = (from, to)`: it sends nothing then."""

    rng: random.Random
    nodes: int = 4
    gpus: int = 2
    interval: float = 1.0
    events: list[dict] = field(default_factory=list)
    dead: dict[str, tuple[float, float]] = field(default_factory=dict)

    def alive(self, node: str, t: float) -> bool:
        start, end = self.dead.get(node, (float("inf"), float("inf")))
        return not start <= t < end

    def emit(self, t: float, **event) -> None:
        self.events.append({"ts": round(T0 + t, 3), **event})

    def heartbeats(self, t0: float, t1: float,
                   links: Callable[[str, float], bool] | None = None) -> None:
        """One heartbeat per node per interval, with a per-node phase and a little jitter."""
        for i in range(self.nodes):
            node, t = node_name(i), t0 + 0.07 * i
            while t < t1:
                if self.alive(node, t):
                    extra = {}
                    if links is not None:
                        extra["links"] = [{"name": "ib0", "up": links(node, t)}]
                    self.emit(t, type="node_heartbeat", node=node, interval=self.interval,
                              **extra)
                t += self.interval + self.rng.uniform(-0.03, 0.03)

    def gpu_samples(self, t0: float, t1: float,
                    tweak: Callable[[str, int, float, dict], None] | None = None) -> None:
        """1 Hz samples of every GPU; `tweak(node, gpu, t, sample)` edits or empties one."""
        for i in range(self.nodes):
            node = node_name(i)
            for gpu in range(self.gpus):
                t = t0 + 0.11 * i + 0.013 * gpu
                while t < t1:
                    if self.alive(node, t):
                        sample = {"type": "gpu_sample", "node": node, "gpu": gpu,
                                  "util": round(self.rng.uniform(85, 99), 1),
                                  "temp_c": round(self.rng.uniform(55, 70), 1),
                                  "ecc_sbe": 3, "ecc_dbe": 0, "nvlink_errors": 12}
                        if tweak is not None:
                            tweak(node, gpu, t, sample)
                        if sample:
                            self.emit(t, **sample)
                    t += 1.0


@dataclass
class Job:
    """A synchronous data-parallel job: `ranks_per_node` ranks on each of `hosts`."""

    cluster: Cluster
    name: str = "job-a"
    hosts: tuple[int, ...] = (0, 1, 2, 3)
    ranks_per_node: int = 2
    gen: int = 0

    @property
    def world(self) -> int:
        return len(self.hosts) * self.ranks_per_node

    def node_of(self, rank: int) -> str:
        return node_name(self.hosts[rank // self.ranks_per_node])

    def worker(self, t: float, rank: int, kind: str, **fields) -> None:
        self.cluster.emit(t, type=kind, node=self.node_of(rank), job=self.name, rank=rank,
                          world_size=self.world, generation=self.gen, pid=1000 + rank, **fields)

    def start(self, t: float) -> None:
        for rank in range(self.world):
            self.worker(t + 0.01 * rank, rank, "worker_start")

    def run(self, t0: float, t1: float, step_time: Callable[[int], float] | float = 1.0,
            first_step: int = 0, rank_factor: dict[int, float] | None = None,
            stop_early: tuple[int, ...] = ()) -> tuple[int, float]:
        """Steps from t0 until t1 (every alive rank reports each step). Ranks in `stop_early`
        miss the last step (they hung first). Returns (next step, time the last one ended)."""
        durations = step_time if callable(step_time) else (lambda _s: step_time)
        t, step, last = t0, first_step, t0
        planned = []
        while True:
            took = durations(step) * self.cluster.rng.uniform(0.97, 1.03)
            if t + took >= t1:
                break
            t += took
            planned.append((step, t, took))
            step += 1
        for n, (s, end, took) in enumerate(planned):
            for rank in range(self.world):
                if n == len(planned) - 1 and rank in stop_early:
                    continue
                at = end + 0.003 * rank
                if not self.cluster.alive(self.node_of(rank), at):
                    continue
                factor = (rank_factor or {}).get(rank, 1.0)
                self.worker(at, rank, "worker_step", step=s, step_time=round(took * factor, 4))
            last = end
        return step, last

    def fail(self, t: float, ranks, error: str | None, exit_code: int | None = 1,
             signal: int | None = None, spread: float = 0.01) -> None:
        """Ranks report `error` (if any) from t, then exit a little later."""
        for n, rank in enumerate(ranks):
            if error is not None:
                self.worker(t + spread * n, rank, "worker_error", error=error)
            self.worker(t + 0.6 + spread * n, rank, "worker_exit", exit_code=exit_code,
                        signal=signal)

    def finish(self, t: float) -> None:
        for rank in range(self.world):
            self.worker(t + 0.02 * rank, rank, "worker_exit", exit_code=0, signal=None)
