"""The three policies on hand-made traces: what each does with one fault, and that trainmedic's
answers are the real coordinator's."""

from __future__ import annotations

import pytest

from tests.unit.simulate.worlds import HOUR, cluster, gpu_lost, healed
from trainmedic.simulate.faults import Fault
from trainmedic.simulate.run import simulate
from trainmedic.simulate.scenario import Scenario


def lost(scenario: Scenario, policy: str, faults: list[Fault]) -> dict[str, float]:
    return simulate(scenario, policy, faults, samples=4).lost_gpu_h


def test_with_a_spare_each_policy_replaces_the_broken_node_trainmedic_soonest_and_from_a_replica():
    spare = cluster(5)
    down = {p: sum(v for k, v in lost(spare, p, [gpu_lost(5000.0)]).items() if k != "checkpoint")
            for p in ("restart-all", "elastic", "trainmedic")}
    assert down["trainmedic"] < down["elastic"] < down["restart-all"]
    healer = lost(spare, "trainmedic", [gpu_lost(5000.0)])
    assert healer["recomputation"] < 2.0 * 4 * 8 / HOUR  # at most the step in progress
    assert healer["shrunk"] == 0 and healer["repair_wait"] == 0
    assert lost(spare, "restart-all", [gpu_lost(5000.0)])["recomputation"] > 0


def test_without_a_spare_restart_all_waits_for_the_repair_while_elastic_and_trainmedic_shrink():
    full = cluster(4)
    waited = (2 * HOUR - 600.0) / HOUR  # the repair, less the collective timeout that found the fault
    assert lost(full, "restart-all", [gpu_lost(5000.0)])["repair_wait"] == pytest.approx(4 * 8 * waited)
    for policy in ("elastic", "trainmedic"):
        losses = lost(full, policy, [gpu_lost(5000.0)])
        assert losses["repair_wait"] == 0
        assert 0 < losses["shrunk"] < 4 * 8 * 2.5 / 4  # a quarter of the job for about the repair time


def test_trainmedic_is_the_real_coordinator_its_plan_moves_the_job_off_the_broken_node():
    world, healer = healed(cluster(5), [gpu_lost(5000.0, "n1", repair_s=10 * HOUR)], 6000.0)
    job = healer.state.jobs["job"]
    assert "n1" not in job.nodes and "n4" in job.nodes  # the spare
    assert not healer.state.nodes["n1"].healthy  # isolated by the coordinator, not by the simulation
    assert world.books["job"].is_running and world.books["job"].size == 4


def test_past_the_isolation_cap_the_job_waits_for_a_person_as_the_coordinator_decides():
    scenario = cluster(10, job_nodes=8, min_nodes=6, operator_s=1800.0)  # cap: 1 node per 600 s
    two = [gpu_lost(5000.0, "n1"), gpu_lost(5100.0, "n2")]
    assert lost(scenario, "trainmedic", two)["person"] > 0
    raised = cluster(10, job_nodes=8, min_nodes=6, coordinator={"isolation_cap": 0.5})
    assert lost(raised, "trainmedic", two)["person"] == 0


def test_a_process_fault_where_no_rank_runs_changes_nothing():
    idle = [Fault(ts=5000.0, node="n4", category="software_error", cause="bug")]
    for policy in ("restart-all", "elastic", "trainmedic"):
        assert simulate(cluster(5), policy, idle, samples=2).faults == 0


def test_the_same_trace_gives_the_same_result():
    faults = [gpu_lost(3000.0), Fault(ts=9000.0, node="n2", category="hang", cause="hang"),
              Fault(ts=20000.0, node="n0", category="link_flap", cause="flap")]
    first, again = (simulate(cluster(5), "trainmedic", faults) for _ in range(2))
    assert first.timeline == again.timeline and first.lost_gpu_h == again.lost_gpu_h
