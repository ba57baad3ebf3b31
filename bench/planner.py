"""Planner timings on synthetic clusters: the DP and placement apart, and a plain-Python DP.

Each cluster has leaves of 32 nodes, 32 jobs sharing the nodes, 64 sizes per throughput
table (a concave scaling curve), and a few failed nodes, so several jobs are affected.
Run: .venv/bin/python bench/planner.py [--runs 15] [--plain-runs 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import Counter

import numpy as np

from trainmedic.recovery.planner.objective import JobObjective, objectives
from trainmedic.recovery.planner.placement import place
from trainmedic.recovery.planner.plan import plan
from trainmedic.recovery.planner.restore import restore_sources
from trainmedic.recovery.planner.solve import solve, tie_rank
from trainmedic.recovery.planner.topology import Topology
from trainmedic.schemas.plan import PlanRequest

JOBS, SIZES, LEAF, FAILED = 32, 64, 32, 8


def cluster(nodes: int, seed: int = 7) -> PlanRequest:
    """`nodes` nodes, FAILED of them down; each job runs at a size of its table, with spares."""
    rng = random.Random(seed)
    names = [f"n{i:05d}" for i in range(nodes)]
    step = max(1, 2 * nodes // JOBS // SIZES)  # sizes reach twice a job's even share
    share = step * (SIZES // 2 - 1)  # a table size, leaving a job's worth of spare nodes
    down = set(rng.sample(names, FAILED))
    jobs = []
    for j in range(JOBS):
        per_node = rng.uniform(0.5e15, 2e15)
        jobs.append({
            "id": f"job-{j:02d}",
            "weight": rng.choice([0.5, 1.0, 2.0]),
            "throughput": {
                str(k): per_node * k**0.9 for k in range(step, step * SIZES + 1, step)
            },
            "current": names[j * share : (j + 1) * share],
            "transition_s": rng.choice([60, 300, 900]),
        })
    return PlanRequest.model_validate({
        "nodes": [
            {"id": n, "switch": f"leaf-{i // LEAF:03d}", "healthy": n not in down}
            for i, n in enumerate(names)
        ],
        "jobs": jobs,
        "horizon_s": 10800,
    })


def solve_plain(jobs: list[JobObjective], budget: int) -> list[int]:
    """The same recurrence and tie rules as `solve`, in plain Python loops over n."""
    best, rank, choices = [0.0] * (budget + 1), [0] * (budget + 1), []
    for job in jobs:
        options = [(k, job.gain(k), tie_rank(job, k, budget)) for k in job.sizes if k <= budget]
        new_best, new_rank, choice = [], [], []
        for n in range(budget + 1):
            top, top_rank, top_k = best[n] + options[0][1], rank[n] + options[0][2], 0
            for k, gain, k_rank in options[1:]:
                if k > n:
                    break
                cand, cand_rank = best[n - k] + gain, rank[n - k] + k_rank
                if cand > top or (cand == top and cand_rank < top_rank):
                    top, top_rank, top_k = cand, cand_rank, k
            new_best.append(top)
            new_rank.append(top_rank)
            choice.append(top_k)
        best, rank = new_best, new_rank
        choices.append(choice)
    sizes, n = [], budget
    for choice in reversed(choices):
        sizes.append(choice[n])
        n -= choice[n]
    return sizes[::-1]


def timed(fn, runs: int) -> tuple[list[float], object]:
    """Milliseconds of each run, and the last result."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1e3)
    return times, result


def summary(times: list[float]) -> str:
    return (f"median {statistics.median(times):8.1f} ms   p95 {np.percentile(times, 95):8.1f} ms"
            f"   ({len(times)} runs)")


def bench(nodes: int, runs: int, plain_runs: int) -> None:
    request = cluster(nodes)
    budget = sum(node.healthy for node in request.nodes)
    jobs = objectives(request)
    dp_times, sizes = timed(lambda: solve(jobs, budget), runs)
    by_id = {job.id: size for job, size in zip(request.jobs, sizes, strict=True)}

    def placement():
        topology = Topology(request.nodes)
        allocations = place(request, by_id, topology)
        return restore_sources(request, allocations, topology)

    place_times, _ = timed(placement, runs)
    plan_times, result = timed(lambda: plan(request), runs)
    plain_times, plain_sizes = timed(lambda: solve_plain(jobs, budget), plain_runs)
    print(f"{nodes} nodes ({budget} healthy) x {JOBS} jobs x {SIZES} sizes")
    print(f"  DP (numpy)              {summary(dp_times)}")
    print(f"  DP (plain Python)       {summary(plain_times)}")
    print(f"  placement + restore     {summary(place_times)}")
    print(f"  plan() end to end       {summary(plan_times)}")
    gain = statistics.median(plain_times) / statistics.median(dp_times)
    print(f"  numpy DP is {gain:.0f}x faster; same sizes: {plain_sizes == sizes}")
    kinds = Counter(source.kind for source in result.restore.values())
    print(f"  the plan moves {len(result.restore)} nodes to a new job "
          f"({kinds['replica']} restore from a replica, {kinds['checkpoint']} from a checkpoint)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15, help="runs of the numpy DP and placement")
    parser.add_argument("--plain-runs", type=int, default=3, help="runs of the plain-Python DP")
    args = parser.parse_args()
    for nodes in (2048, 16384):
        bench(nodes, args.runs, args.plain_runs)


if __name__ == "__main__":
    main()
