"""The dynamic program against a brute-force enumerator of every size combination."""

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from trainmedic.recovery.planner.objective import JobObjective
from trainmedic.recovery.planner.solve import solve, tie_rank


def total_gain(jobs, sizes):
    """Σ G summed in job order, as the planner reports it."""
    total = 0.0
    for job, size in zip(jobs, sizes, strict=True):
        total += job.gain(size)
    return total


def brute_force(jobs, budget):
    """Every feasible combination, best first by PLANNER.md's objective and the tie rules."""
    plans = [
        xs for xs in itertools.product(*(job.sizes for job in jobs)) if sum(xs) <= budget
    ]
    return min(plans, key=lambda xs: (
        -total_gain(jobs, xs),
        sum(x != job.current_size for job, x in zip(jobs, xs, strict=True)),
        sum(xs),
        tuple(reversed(xs)),
    ))


@st.composite
def jobs(draw, value):
    count = draw(st.integers(0, 4))
    out = []
    for _ in range(count):
        sizes = draw(st.lists(st.integers(1, 8), min_size=1, max_size=3, unique=True))
        out.append(JobObjective(
            weight=draw(st.sampled_from([1.0, 2.0, 3.0])),
            table={size: draw(value) for size in sizes},
            current_size=draw(st.integers(0, 8)),
            affected=draw(st.booleans()),
            transition_s=float(draw(st.integers(0, 50))),
            horizon_s=100.0,
        ))
    return out


# Small integer throughputs keep every sum exact, so ties are real and the tie rules testable.
@settings(max_examples=300, deadline=None)
@given(jobs(st.integers(0, 20).map(float)), st.integers(0, 14))
def test_matches_brute_force_including_tie_breaks(jobs, budget):
    assert solve(jobs, budget) == list(brute_force(jobs, budget))


@settings(max_examples=200, deadline=None)
@given(jobs(st.floats(0, 1e16, allow_nan=False)), st.integers(0, 14))
def test_reaches_the_brute_force_optimum_with_arbitrary_throughputs(jobs, budget):
    sizes = solve(jobs, budget)
    assert sum(sizes) <= budget
    assert all(size in job.sizes for job, size in zip(jobs, sizes, strict=True))
    assert total_gain(jobs, sizes) == total_gain(jobs, brute_force(jobs, budget))


def job(table, current_size=0, affected=False):
    return JobObjective(1.0, table, current_size, affected, transition_s=10.0, horizon_s=100.0)


def test_no_jobs_and_no_nodes():
    assert solve([], 5) == []
    assert solve([job({1: 1.0}, current_size=1)], 0) == [0]


def test_sizes_larger_than_the_cluster_are_never_chosen():
    assert solve([job({4: 1.0, 64: 100.0})], 10) == [4]


def test_a_tie_keeps_the_current_size():
    # Throughput is flat from 4 to 8: a job at 8 stays at 8 rather than shrink for free.
    assert solve([job({4: 5.0, 8: 5.0}, current_size=8)], 8) == [8]


def test_a_tie_between_new_sizes_takes_fewer_nodes():
    assert solve([job({4: 5.0, 8: 5.0}, current_size=2)], 8) == [4]


def test_a_tie_between_jobs_gives_the_node_to_the_earlier_job():
    assert solve([job({4: 5.0}), job({4: 5.0})], 4) == [4, 0]


def full_table(jobs, budget):
    """The dynamic program over every budget 0..budget, one size at a time: what `solve` computes
    on a part of the table only."""
    best, rank, choices = np.zeros(budget + 1), np.zeros(budget + 1, dtype=np.int64), []
    for job in jobs:
        sizes = [k for k in job.sizes if k <= budget]
        new_best, new_rank = best + job.gain(0), rank + tie_rank(job, 0, budget)
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
    out, n = [], budget
    for choice in reversed(choices):
        out.append(int(choice[n]))
        n -= out[-1]
    return out[::-1]


@st.composite
def large_jobs(draw, value):
    out = []
    for _ in range(draw(st.integers(0, 8))):
        sizes = draw(st.lists(st.integers(1, 60), min_size=1, max_size=6, unique=True))
        out.append(JobObjective(
            weight=draw(st.sampled_from([1.0, 2.0, 3.0])), table={size: draw(value) for size in sizes},
            current_size=draw(st.integers(0, 60)), affected=draw(st.booleans()),
            transition_s=float(draw(st.integers(0, 50))), horizon_s=100.0))
    return out


# Budgets from none to far more than the jobs can use, so that both ends of the table are cut.
@settings(max_examples=300, deadline=None)
@given(large_jobs(st.one_of(st.integers(0, 20).map(float), st.floats(0, 1e16))), st.integers(0, 400))
def test_matches_the_full_table(jobs, budget):
    assert solve(jobs, budget) == full_table(jobs, budget)
