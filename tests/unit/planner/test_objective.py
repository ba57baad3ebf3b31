"""F, C and G of PLANNER.md on examples checked by hand."""

import pytest

from trainmedic.recovery.planner.objective import JobObjective, objectives
from trainmedic.schemas.plan import PlanRequest

TABLE = {4: 1.1e15, 8: 2.1e15, 16: 4.0e15}


def job(current_size=4, affected=False, weight=1.0, transition_s=120.0, table=TABLE):
    return JobObjective(weight, table, current_size, affected, transition_s, horizon_s=10800.0)


def test_planner_md_example_keeps_size_4_after_losing_a_node():
    # Affected (n04 is down), stays at 4: F·h − T(4)·120 = 1.1e15 · (10800 − 120).
    assert job(affected=True).gain(4) == pytest.approx(1.1748e19)
    assert job(affected=True).value(4) == 1.1e15


def test_unaffected_job_that_keeps_its_size_pays_nothing():
    assert job().cost(4) == 0.0
    assert job().gain(4) == 1.1e15 * 10800


def test_resizing_costs_the_current_throughput_for_the_transition():
    assert job().cost(8) == 1.1e15 * 120
    assert job().gain(8) == 2.1e15 * 10800 - 1.1e15 * 120
    assert job().gain(0) == -1.1e15 * 120


def test_weight_scales_value_and_cost():
    assert job(weight=2.0, affected=True).gain(8) == 2 * 2.1e15 * 10800 - 2 * 1.1e15 * 120


def test_queued_job_has_no_transition_cost():
    queued = job(current_size=0)
    assert queued.cost(8) == 0.0
    assert queued.gain(0) == 0.0


def test_current_size_missing_from_table_uses_the_largest_size_below_it():
    odd = job(current_size=6)
    assert odd.current_throughput == 1.1e15
    assert odd.cost(4) == odd.cost(8) == odd.cost(0) == 1.1e15 * 120


def test_current_size_below_every_table_size_has_zero_throughput():
    assert job(current_size=2).current_throughput == 0.0


def test_objectives_apply_defaults_and_mark_affected_jobs():
    request = PlanRequest.model_validate({
        "nodes": [{"id": "a"}, {"id": "b", "healthy": False}, {"id": "c"}],
        "jobs": [
            {"id": "hit", "throughput": {"2": 1.0}, "current": ["a", "b"]},
            {"id": "fine", "throughput": {"1": 1.0}, "current": ["c"], "transition_s": 5},
        ],
        "horizon_s": 100,
        "transition_s": 30,
    })
    hit, fine = objectives(request)
    assert (hit.affected, hit.transition_s, hit.current_size) == (True, 30.0, 2)
    assert (fine.affected, fine.transition_s) == (False, 5.0)
