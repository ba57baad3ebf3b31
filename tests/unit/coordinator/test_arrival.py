"""Issue 44: the coordinator judges its windows on when it received an incident (its own clock, or the
broker's on a topic the broker stamps), never on the incident's `ts`, which another host's clock set:
a detector or node a few seconds behind or ahead moves no decision."""

from __future__ import annotations

import pytest

from tests.unit.coordinator.test_lifecycle import shrunk
from tests.unit.coordinator.test_limits import lost, refold
from tests.unit.coordinator.world import LIMITED, Recorder, incident, of_type
from trainmedic.bus.message import Record
from trainmedic.recovery.coordinator.core import CoordinatorConfig
from trainmedic.recovery.coordinator.intake import arrival, receive
from trainmedic.schemas import Topics

TOPICS = Topics("t.")
HALF = CoordinatorConfig(**{**LIMITED.model_dump(), "isolation_cap": 0.5})  # 3 of 6 nodes; grouped over 2 s


@pytest.mark.parametrize("skew", [-2.0, -30.0, 5.0, 3600.0])
def test_node_faults_that_arrive_within_the_window_are_one_re_plan_whatever_their_ts(skew: float) -> None:
    rec = Recorder(HALF)
    rec.started()
    assert rec.feed(lost("a", "n1", ts=100.0 + skew, category="gpu_lost"), now=100.0) == []
    assert rec.feed(lost("b", "n2", ts=101.5 + skew), now=101.5) == []
    assert rec.tick(now=101.9) == []  # the first arrived 1.9 s ago
    out = rec.tick(now=102.0)
    [plan] = of_type(out, "recovery_planned")
    assert plan.isolated == {"n1": "a", "n2": "b"} and not {"n1", "n2"} & set(plan.nodes)
    assert rec.state.arrived == {"a": 100.0, "b": 101.5}
    assert refold(rec) == rec.state  # when it arrived is not of the log


def test_a_copy_read_again_does_not_move_its_arrival_and_its_resolution_arrives_anew() -> None:
    rec = Recorder(HALF)
    rec.started()
    first = lost("a", "n1", ts=100.0, category="gpu_lost")
    rec.feed(first, now=100.0)
    rec.feed(first, now=101.9)  # redelivered
    assert rec.state.arrived["a"] == 100.0 and of_type(rec.tick(now=102.0), "recovery_planned")
    rec.feed(first.model_copy(update={"status": "resolved", "ts": 90.0}), now=150.0)
    assert rec.state.arrived["a"] == 150.0


def test_probation_runs_from_when_the_resolution_arrived() -> None:
    rec = shrunk()  # n3 isolated at 50 for incident gpu; probation 300 s
    resolved = incident("gpu", "SEV1", node="n3", job=None, ts=60.0, status="resolved", category="gpu_lost")
    rec.feed(resolved, now=200.0)  # stamped 60 by a clock far behind: clean from 200, not from 60
    assert rec.tick(now=499.0) == []
    assert of_type(rec.tick(now=500.0), "node_readmitted")


def record(topic: str, stamp_ms: int | None) -> Record:
    return Record(topic, 0, 7, "n1", lost("a", "n1", ts=1.0), b"", stamp_ms)


def test_arrival_is_the_brokers_stamp_on_a_topic_it_stamps_and_else_the_coordinators_clock() -> None:
    assert TOPICS.spec_of(TOPICS.acks).broker_time and not TOPICS.spec_of(TOPICS.incidents).broker_time
    assert arrival(record(TOPICS.acks, 99_500), TOPICS, now=100.0) == 99.5
    assert arrival(record(TOPICS.acks, 120_000), TOPICS, now=100.0) == 100.0  # never ahead of ours
    assert arrival(record(TOPICS.acks, None), TOPICS, now=100.0) == 100.0
    assert arrival(record(TOPICS.incidents, 99_000), TOPICS, now=100.0) == 100.0  # its writer's clock
    assert arrival(record(TOPICS.acks, 99_500), TOPICS, now=None) == 99.5  # a rebuild
    assert arrival(record(TOPICS.incidents, 99_000), TOPICS, now=None) is None


def test_a_live_record_is_folded_at_its_arrival() -> None:
    rec = Recorder(HALF)
    rec.started()
    late = record(TOPICS.incidents, 40_000)  # ts 1.0, written at 40: the coordinator reads it at 100
    assert receive(rec.state, late, 100.0, arrival(late, TOPICS, 100.0)) == []
    assert rec.state.arrived == {"a": 100.0}
