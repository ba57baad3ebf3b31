"""Restore sources: the nearest surviving replica of the same job, else the checkpoint."""

from tests.unit.planner.cluster import request
from trainmedic.recovery.planner.restore import restore_sources
from trainmedic.recovery.planner.topology import Topology
from trainmedic.schemas.commands import RestoreSource

SWITCHES = {"leaf-1": ["a1", "a2", "a3"], "leaf-2": ["b1", "b2", "b3"], None: ["s1"]}


def sources(jobs, allocations, down=()):
    req = request(SWITCHES, jobs, down)
    return restore_sources(req, allocations, Topology(req.nodes))


def replica(node):
    return RestoreSource(kind="replica", node=node)


def test_newcomer_restores_from_a_survivor_on_its_own_switch():
    jobs = [{"id": "j", "throughput": {"4": 1.0}, "current": ["b3", "a1", "a2", "b1"]}]
    got = sources(jobs, {"j": ("a1", "a2", "b3", "b2")}, down={"b1"})
    assert got == {"b2": replica("b3")}


def test_equally_near_survivors_go_by_id():
    jobs = [{"id": "j", "throughput": {"4": 1.0}, "current": ["a3", "a2", "s1", "b1"]}]
    got = sources(jobs, {"j": ("a3", "a2", "b2")}, down={"s1", "b1"})
    assert got == {"b2": replica("a2")}


def test_spine_survivor_is_nearer_than_another_leaf():
    jobs = [{"id": "j", "throughput": {"3": 1.0}, "current": ["a1", "s1", "b1"]}]
    assert sources(jobs, {"j": ("a1", "s1", "b2")}, down={"b1"}) == {"b2": replica("s1")}


def test_no_survivor_means_the_latest_checkpoint():
    jobs = [
        {"id": "lost", "throughput": {"1": 1.0}, "current": ["a1"]},
        {"id": "queued", "throughput": {"1": 1.0}},
    ]
    got = sources(jobs, {"lost": ("a2",), "queued": ("b1",)}, down={"a1"})
    assert got == {"a2": RestoreSource(kind="checkpoint"), "b1": RestoreSource(kind="checkpoint")}


def test_replicas_come_only_from_the_same_job():
    jobs = [
        {"id": "x", "throughput": {"2": 1.0}, "current": ["a1", "a2"]},
        {"id": "y", "throughput": {"2": 1.0}, "current": ["b1", "a3"]},
    ]
    got = sources(jobs, {"x": ("a1", "a2"), "y": ("b1", "b2")}, down={"a3"})
    assert got == {"b2": replica("b1")}
