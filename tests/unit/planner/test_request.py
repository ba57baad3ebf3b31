"""Input errors the schema refuses, with the place they occur in the message."""

import pytest
from pydantic import ValidationError

from trainmedic.schemas.plan import PlanRequest


def check(document, where, what):
    with pytest.raises(ValidationError) as caught:
        PlanRequest.model_validate(document)
    error = caught.value.errors()[0]
    assert error["loc"] == where
    assert what in error["msg"]


def doc(nodes=({"id": "a"}, {"id": "b"}), jobs=(), **extra):
    return {"nodes": list(nodes), "jobs": list(jobs), "horizon_s": 60, **extra}


def test_node_listed_twice():
    check(doc(nodes=[{"id": "a"}, {"id": "a"}]), ("nodes",), "nodes[0] and nodes[1]")


def test_node_in_two_jobs():
    jobs = [{"id": "x", "throughput": {1: 1.0}, "current": ["a"]},
            {"id": "y", "throughput": {1: 1.0}, "current": ["b", "a"]}]
    check(doc(jobs=jobs), (), "jobs[1].current: node 'a' already runs job 'x'")


def test_unknown_current_node():
    check(doc(jobs=[{"id": "x", "throughput": {1: 1.0}, "current": ["zz"]}]), (), "'zz' is not")


def test_non_positive_size():
    check(doc(jobs=[{"id": "x", "throughput": {0: 1.0}}]), ("jobs", 0, "throughput"), "[0]")


def test_negative_throughput():
    negative = doc(jobs=[{"id": "x", "throughput": {2: -1.0}}])
    check(negative, ("jobs", 0, "throughput", 2), "greater than or equal to 0")


def test_empty_table():
    check(doc(jobs=[{"id": "x", "throughput": {}}]), ("jobs", 0, "throughput"), "at least one")


def test_wrong_type_is_not_coerced():
    check(doc(nodes=[{"id": "a", "healthy": "yes"}]), ("nodes", 0, "healthy"), "boolean")
    check(doc(nodes=[{"id": "a", "gpus": "8"}]), ("nodes", 0, "gpus"), "integer")


def test_unknown_field():
    check(doc(rack="r1"), ("rack",), "Extra inputs")


def test_job_listed_twice():
    jobs = [{"id": "x", "throughput": {1: 1.0}}, {"id": "x", "throughput": {1: 1.0}}]
    check(doc(jobs=jobs), ("jobs",), "jobs[0] and jobs[1]")
