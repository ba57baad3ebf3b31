"""The exact dynamic program over jobs × node budgets that picks every job's size.

S[i][n] = max over allowed k ≤ n of S[i−1][n−k] + G_i(k), vectorized over n with numpy.
Ties in Σ G (exact equality) go, in this order, to the plan that resizes fewer jobs, then
to the one that uses fewer nodes, then to the one whose last job is smallest, then the
job before it, and so on (so a job listed earlier wins a contested node).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from recovery.planner.objective import JobObjective


def tie_rank(job: JobObjective, size: int, budget: int) -> int:
    """What a size adds to the tie-break key: resizing counts more than any number of nodes."""
    return (budget + 1) * (size != job.current_size) + size


def solve(jobs: Sequence[JobObjective], budget: int) -> list[int]:
    """The sizes, one per job, that maximize Σ G with Σ sizes ≤ budget (budget ≥ 0).

    Table sizes above the budget can never fit and are left out.
    """
    best = np.zeros(budget + 1)  # S[i][n]: best Σ G of the first i jobs on at most n nodes
    rank = np.zeros(budget + 1, dtype=np.int64)  # the tie-break key of that best plan
    choices = []
    for job in jobs:
        sizes = [k for k in job.sizes if k <= budget]
        # Size 0 fits every budget; larger sizes replace it only where strictly better, and
        # sizes run ascending, so among equal keys the smallest size stays.
        new_best = best + job.gain(0)
        new_rank = rank + tie_rank(job, 0, budget)
        choice = np.zeros(budget + 1, dtype=np.int64)
        for k in sizes[1:]:
            cand = best[: budget + 1 - k] + job.gain(k)
            cand_rank = rank[: budget + 1 - k] + tie_rank(job, k, budget)
            held, held_rank = new_best[k:], new_rank[k:]
            better = (cand > held) | ((cand == held) & (cand_rank < held_rank))
            np.copyto(held, cand, where=better)
            np.copyto(held_rank, cand_rank, where=better)
            np.copyto(choice[k:], k, where=better)
        best, rank = new_best, new_rank
        choices.append(choice)
    sizes_out = []
    n = budget
    for choice in reversed(choices):
        k = int(choice[n])
        sizes_out.append(k)
        n -= k
    return sizes_out[::-1]
