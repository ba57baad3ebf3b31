"""The exact dynamic program over jobs × node budgets that picks every job's size:
S[i][n] = max over allowed k ≤ n of S[i−1][n−k] + G_i(k), vectorized over n with numpy; exact ties
in Σ G go by the rules of docs/planner.md, "Ties".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trainmedic.recovery.planner.objective import JobObjective


def tie_rank(job: JobObjective, size: int, budget: int) -> int:
    """What a size adds to the tie-break key: resizing counts more than any number of nodes."""
    return (budget + 1) * (size != job.current_size) + size


def solve(jobs: Sequence[JobObjective], budget: int) -> list[int]:
    """The sizes, one per job, that maximize Σ G with Σ sizes ≤ budget (budget ≥ 0).

    Table sizes above the budget can never fit and are left out. S[i][n] is computed only for the
    n it can differ at and be read at: above the largest sizes of the first i jobs summed (`top`)
    every size fits, so S[i][n] stays what it is there; and the walk back from S[last][budget]
    reads only n ≥ budget − the largest sizes of the later jobs summed (`low`). With spare nodes
    that leaves a few entries per job; each one still holds the sum the full table forms.
    """
    allowed = [[k for k in job.sizes if k <= budget] for job in jobs]
    lows, later = [], 0  # lows[i]: the smallest n that S[i][n] is read at
    for sizes in reversed(allowed):
        lows.append(max(0, budget - later))
        later += sizes[-1]
    lows.reverse()
    # S[i−1][n] for n in low..top is best[n − low] (and rank, its tie-break key); above top it is
    # best[-1]. Before any job that is 0 everywhere.
    low = top = 0
    best = np.zeros(1)  # S[i][n]: best Σ G of the first i jobs on at most n nodes
    rank = np.zeros(1, dtype=np.int64)  # the tie-break key of that best plan
    choices = []
    for job, sizes, new_low in zip(jobs, allowed, lows, strict=True):
        new_top = min(budget, top + sizes[-1])
        new_low = min(new_low, new_top)
        best = np.pad(best, (0, new_top - top), mode="edge")  # S[i−1] up to the new top
        rank = np.pad(rank, (0, new_top - top), mode="edge")
        # Size 0 fits every budget; larger sizes replace it only where strictly better, and
        # sizes run ascending, so among equal keys the smallest size stays.
        new_best = best[new_low - low:] + job.gain(0)
        new_rank = rank[new_low - low:] + tie_rank(job, 0, budget)
        choice = np.zeros(new_top + 1 - new_low, dtype=np.int64)
        for k in sizes[1:]:
            first = max(k, new_low)  # the smallest n that size k fits in, within the window
            cand = best[first - k - low: new_top + 1 - k - low] + job.gain(k)
            cand_rank = rank[first - k - low: new_top + 1 - k - low] + tie_rank(job, k, budget)
            held, held_rank = new_best[first - new_low:], new_rank[first - new_low:]
            better = (cand > held) | ((cand == held) & (cand_rank < held_rank))
            np.copyto(held, cand, where=better)
            np.copyto(held_rank, cand_rank, where=better)
            np.copyto(choice[first - new_low:], k, where=better)
        best, rank, low, top = new_best, new_rank, new_low, new_top
        choices.append((choice, low, top))
    sizes_out = []
    n = budget
    for choice, low, top in reversed(choices):
        k = int(choice[min(n, top) - low])
        sizes_out.append(k)
        n -= k
    return sizes_out[::-1]
