"""Placement: kept nodes, nearest switches first, no double use, unhealthy nodes unused."""

import pytest

from tests.unit.planner.cluster import request
from trainmedic.recovery.planner.placement import place
from trainmedic.recovery.planner.topology import Topology

SWITCHES = {
    "leaf-1": ["a1", "a2", "a3", "a4"],
    "leaf-2": ["b1", "b2", "b3", "b4"],
    "leaf-3": ["c1", "c2", "c3", "c4"],
    None: ["s1", "s2"],  # on the spine itself: nearer to a leaf than any other leaf is
}


def placed(jobs, sizes, down=()):
    req = request(SWITCHES, jobs, down)
    return place(req, sizes, Topology(req.nodes))


def test_job_keeps_its_healthy_current_nodes_and_replaces_the_lost_one_on_its_switch():
    jobs = [{"id": "j", "throughput": {"3": 1.0}, "current": ["a3", "a1", "a2"]}]
    assert placed(jobs, {"j": 3}, down={"a2"}) == {"j": ("a3", "a1", "a4")}


def test_extra_nodes_come_from_the_switch_holding_most_of_the_job():
    jobs = [{"id": "j", "throughput": {"4": 1.0}, "current": ["a1", "b1", "b2"]}]
    assert placed(jobs, {"j": 4}) == {"j": ("a1", "b1", "b2", "b3")}


def test_then_the_nearest_switch_the_spine_before_another_leaf():
    jobs = [{"id": "j", "throughput": {"6": 1.0}, "current": ["a1", "a2", "a3"]}]
    assert placed(jobs, {"j": 6}) == {"j": ("a1", "a2", "a3", "a4", "s1", "s2")}


def test_equally_near_leaves_are_taken_in_name_order():
    jobs = [{"id": "j", "throughput": {"8": 1.0}, "current": ["a1", "a2", "a3", "a4"]}]
    allocation = placed(jobs, {"j": 8}, down={"s1", "s2"})["j"]
    assert allocation == ("a1", "a2", "a3", "a4", "b1", "b2", "b3", "b4")


def test_shrinking_job_keeps_the_nodes_on_its_home_switch():
    jobs = [{"id": "j", "throughput": {"2": 1.0, "4": 2.0}, "current": ["b1", "a1", "a2", "a3"]}]
    assert placed(jobs, {"j": 2}) == {"j": ("a1", "a2")}


def test_no_node_serves_two_jobs_and_unhealthy_nodes_serve_none():
    jobs = [
        {"id": "x", "throughput": {"4": 1.0}, "current": ["a1", "a2", "a3", "a4"]},
        {"id": "y", "throughput": {"4": 1.0}, "current": ["b1", "b2"]},
        {"id": "z", "throughput": {"3": 1.0}},
    ]
    allocations = placed(jobs, {"x": 4, "y": 4, "z": 3}, down={"a4", "b3"})
    used = [node for nodes in allocations.values() for node in nodes]
    assert len(used) == len(set(used)) == 11
    assert not {"a4", "b3"} & set(used)
    assert allocations["x"][:3] == ("a1", "a2", "a3")
    assert allocations["y"][:2] == ("b1", "b2")


def test_job_that_lost_every_node_restarts_near_where_it_was():
    jobs = [{"id": "j", "throughput": {"2": 1.0}, "current": ["c1", "c2"]}]
    assert placed(jobs, {"j": 2}, down={"c1", "c2"}) == {"j": ("c3", "c4")}


def test_queued_job_goes_to_the_switch_with_most_free_nodes():
    jobs = [
        {"id": "big", "throughput": {"3": 1.0}, "current": ["a1", "a2", "a3"]},
        {"id": "new", "throughput": {"3": 1.0}},
    ]
    allocations = placed(jobs, {"big": 3, "new": 3}, down={"b1"})
    assert allocations["new"] == ("c1", "c2", "c3")


def test_stopped_job_frees_its_nodes_for_others():
    jobs = [
        {"id": "old", "throughput": {"4": 1.0}, "current": ["c1", "c2", "c3", "c4"]},
        {"id": "new", "throughput": {"4": 1.0}},
    ]
    allocations = placed(jobs, {"old": 0, "new": 4}, down={"a1", "b1"})
    assert allocations == {"old": (), "new": ("c1", "c2", "c3", "c4")}


def test_sizes_beyond_the_healthy_nodes_are_refused():
    with pytest.raises(ValueError, match="14 are healthy"):
        placed([{"id": "j", "throughput": {"15": 1.0}}], {"j": 15})


def test_jobs_with_a_pool_are_placed_first_so_that_no_job_without_one_takes_their_spares():
    jobs = [{"id": "free", "throughput": {"2": 1.0}, "current": []},
            {"id": "pooled", "throughput": {"2": 1.0}, "current": ["a1"], "pool": ["a1", "a2"]}]
    down = {"b1", "b2", "b3", "b4", "c1", "c2", "c3", "c4", "s1", "s2"}  # a1-a4 left: a2 would go first
    for order in (jobs, jobs[::-1]):
        assert placed(order, {"free": 2, "pooled": 2}, down) == {"free": ("a3", "a4"), "pooled": ("a1", "a2")}
