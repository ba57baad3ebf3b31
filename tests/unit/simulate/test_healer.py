"""The trainmedic policy's world: what it tells the real coordinator, and when it lets it tick, so no
decision waits on news or a tick the simulation never delivers."""

from __future__ import annotations

from tests.unit.simulate.worlds import HOUR, cluster, gpu_lost, healed
from trainmedic.simulate.faults import Fault
from trainmedic.simulate.scenario import Scenario


def test_a_node_repaired_before_its_fault_is_detected_is_readmitted():
    # repaired one second after the fault, before the next NVML sample reports it: the coordinator
    # isolates it as for any lost GPU, its incident resolves, and it is back after the probation
    world, healer = healed(cluster(5), [gpu_lost(5000.0, "n1", repair_s=1.0)], 5000.0 + HOUR)
    assert healer.state.nodes["n1"].isolations  # the coordinator did isolate it
    assert healer.state.nodes["n1"].healthy
    assert world.books["job"].is_running


def test_a_command_accepted_and_never_done_times_out_when_the_coordinator_says():
    # n2 breaks while the job restarts onto it (a 300 s transition), past the isolation cap: its
    # command was accepted and is never done, and only the coordinator's done timeout (600 s) moves the
    # job on — not the operator, who answers the cap's alert half an hour later
    scenario = cluster(5, restart={"base_s": 300.0}, operator_s=1800.0)
    world, _ = healed(scenario, [gpu_lost(5000.0, "n1"), gpu_lost(5100.0, "n2")], 5000.0 + 2 * HOUR)
    done_timeout_s = 600.0
    assert [ts for ts in world.books["job"].resumed if ts > 5100.0][0] < 5004.0 + done_timeout_s + 400.0


def test_an_incident_held_back_for_a_node_group_is_decided_on_the_next_tick_after_the_group():
    # n1 takes the isolation cap; then the job's software error waits for the group of n3's lost GPU,
    # which the cap holds: the error is due, and the coordinator's next tick (1 s) restarts the job
    scenario = cluster(10, job_nodes=8, min_nodes=6)
    faults = [gpu_lost(5000.0, "n1"), Fault(ts=5100.0, node="n2", category="software_error", cause="bug"),
              gpu_lost(5100.2, "n3")]
    _, healer = healed(scenario, faults, 5110.0)
    software = [i for i in healer.state.incidents.values() if i.category == "software_error"]
    assert software and not healer.state.pending & {i.id for i in software}


def test_a_job_stopped_for_want_of_nodes_grows_back_on_a_node_readmitted_while_it_stopped():
    # b (2 nodes, no smaller size) loses n3 and is stopped: a 300 s stop during which n3 is repaired
    # and re-admitted; the capacity re-plan that waited for the stop gives b its nodes back after it
    scenario = Scenario.model_validate({
        "name": "t", "duration_days": 1, "cluster": {"nodes": 5, "nodes_per_switch": 4},
        "jobs": [{"id": "a", "nodes": 3, "step_s": 2.0}, {"id": "b", "nodes": 2, "step_s": 2.0}],
        "policies": {"trainmedic": {"restart": {"base_s": 300.0},
                                    "coordinator": {"readmit_probation_s": 100.0}}}})
    world, healer = healed(scenario, [gpu_lost(1000.0, "n3", repair_s=10.0)], 5000.0)
    assert healer.state.nodes["n3"].healthy and healer.state.jobs["b"].nodes
    assert world.books["b"].is_running and world.books["b"].resumed


def test_a_node_isolated_for_a_failed_command_is_returned_by_the_person_paged_once_repaired():
    # n2 breaks past the isolation cap: the job's restart onto it is never answered, and the coordinator
    # isolates it for the failed restart (an escalation nothing resolves); repaired, a person returns it
    faults = [gpu_lost(5000.0, "n1"), gpu_lost(5100.0, "n2")]
    _, healer = healed(cluster(5), faults, 5100.0 + 5 * HOUR)
    n2 = healer.state.nodes["n2"]
    assert any(healer.state.incidents[i].category == "restart_failed" for _, i in n2.isolations)
    assert n2.healthy
