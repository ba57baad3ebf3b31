"""A policy over seeds: the 95 % confidence half-width of a mean over a few seeds is Student's."""

from __future__ import annotations

import statistics

import pytest

from trainmedic.simulate.progress import LOSSES
from trainmedic.simulate.run import Outcome, Summary


def outcome(ettr: float) -> Outcome:
    return Outcome(policy="p", ettr=ettr, waf_accumulated=1.0, goodput_gpu_h=1.0,
                   lost_gpu_h=dict.fromkeys(LOSSES, 0.0), faults=0, gave_up=0, timeline=[])


def test_three_seeds_give_students_half_width_not_the_normal_one():
    ettrs = [0.80, 0.85, 0.90]
    summary = Summary("p", [outcome(e) for e in ettrs], [1.0, 1.0, 1.0])
    t_2 = 4.303  # Student's t, two-sided 95 %, 2 degrees of freedom
    assert summary.ci95["ettr"] == pytest.approx(t_2 * statistics.stdev(ettrs) / 3 ** 0.5, rel=1e-3)
    assert Summary("p", [outcome(0.8)], [1.0]).ci95["ettr"] == 0.0
