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

    Table sizes above the budget can never fit and are left out. S[i][n] is computed only for
    the n the walk back from S[last][budget] can reach: the jobs after i take at most their
    largest sizes, so n ≥ budget − Σ of those (`low`). On a large cluster that is a small part
    of 0..budget for all but the first jobs; within it every sum is the one the full table forms.
    """
    allowed = [[k for k in job.sizes if k <= budget] for job in jobs]
    lows, later = [], 0  # lows[i]: the smallest n that S[i][n] is read at
    for sizes in reversed(allowed):
        lows.append(max(0, budget - later))
        later += sizes[-1]
    lows.reverse()
    low = 0  # S[i−1] is kept for n in low..budget; before any job that is all of 0..budget
    best = np.zeros(budget + 1)  # S[i][n]: best Σ G of the first i jobs on at most n nodes
    rank = np.zeros(budget + 1, dtype=np.int64)  # the tie-break key of that best plan
    choices = []
    for job, sizes, new_low in zip(jobs, allowed, lows, strict=True):
        # Size 0 fits every budget; larger sizes replace it only where strictly better, and
        # sizes run ascending, so among equal keys the smallest size stays.
        new_best = best[new_low - low:] + job.gain(0)
        new_rank = rank[new_low - low:] + tie_rank(job, 0, budget)
        choice = np.zeros(budget + 1 - new_low, dtype=np.int64)
        for k in sizes[1:]:
            first = max(k, new_low)  # the smallest n that size k fits in, within the window
            cand = best[first - k - low: budget + 1 - k - low] + job.gain(k)
            cand_rank = rank[first - k - low: budget + 1 - k - low] + tie_rank(job, k, budget)
            held, held_rank = new_best[first - new_low:], new_rank[first - new_low:]
            better = (cand > held) | ((cand == held) & (cand_rank < held_rank))
            np.copyto(held, cand, where=better)
            np.copyto(held_rank, cand_rank, where=better)
            np.copyto(choice[first - new_low:], k, where=better)
        best, rank, low = new_best, new_rank, new_low
        choices.append((choice, low))
    sizes_out = []
    n = budget
    for choice, low in reversed(choices):
        k = int(choice[n - low])
        sizes_out.append(k)
        n -= k
    return sizes_out[::-1]
