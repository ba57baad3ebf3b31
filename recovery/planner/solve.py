"""The exact dynamic program over jobs × node budgets that picks every job's size.

S[i][n] = max over allowed k ≤ n of S[i−1][n−k] + G_i(k), vectorized over n and k with numpy.
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
        # One row per size k, one column per n: S[i−1][n − k] + G(k), and −inf where k > n.
        ks = np.array(sizes)
        below = np.arange(new_low, new_top + 1) - ks[:, None]
        fits = below >= 0
        below = np.where(fits, below - low, 0)
        cand = np.where(fits, best[below] + np.array([job.gain(k) for k in sizes])[:, None], -np.inf)
        cand_rank = rank[below] + np.array([tie_rank(job, k, budget) for k in sizes])[:, None]
        # Each n takes the best Σ G, then the smallest tie-break key, then the smallest size
        # (argmax takes the first row, and sizes run ascending). Size 0 always fits.
        new_best = cand.max(axis=0)
        cand_rank = np.where(cand == new_best, cand_rank, np.iinfo(np.int64).max)
        new_rank = cand_rank.min(axis=0)
        choices.append((ks[np.argmax(cand_rank == new_rank, axis=0)], new_low, new_top))
        best, rank, low, top = new_best, new_rank, new_low, new_top
    sizes_out = []
    n = budget
    for choice, low, top in reversed(choices):
        k = int(choice[min(n, top) - low])
        sizes_out.append(k)
        n -= k
    return sizes_out[::-1]
