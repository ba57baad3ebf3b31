"""Forged coordinator decisions against the real coordinator on the real broker: a `recovery_planned`
written to the detector's incidents topic (moving a running job onto other nodes) and a
`node_readmitted` written to the operators' nodes topic. Only the coordinator writes its decisions,
to its own recovery topic, so a broker ACL per topic can tell them apart; read anywhere else, they
are dead-lettered with the reason and counted, and the coordinator issues nothing for them, live or
after a restart."""

from __future__ import annotations

import time

import pytest
from prometheus_client import REGISTRY

from tests.integration.test_coordinator import ack_all, leading, read, step_until
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.reader import NOW, TopicReader
from trainmedic.bus.settings import KafkaSettings
from trainmedic.recovery.coordinator.core import CoordinatorConfig, JobState, NodeConfig
from trainmedic.schemas import JobSpec, JobSubmitted, NodeReadmitted, RecoveryKind, RecoveryPlanned

pytestmark = pytest.mark.kafka

CONFIG = CoordinatorConfig(tick_s=0.2, default_address="127.0.0.1",
                           nodes=tuple(NodeConfig(id=f"n{i}", switch="leaf-1") for i in range(1, 5)))


def refused(topic: str) -> float:
    counted = REGISTRY.get_sample_value("trainmedic_coordinator_misplaced_records_total", {"topic": topic})
    return counted or 0.0


def letters(kafka: KafkaSettings) -> list:
    with TopicReader(kafka, [kafka.topics.dlq], end=NOW, validate=True) as reader:
        return [r.event for batch in reader.batches() for r in batch]


def test_a_forged_plan_on_incidents_and_a_forged_readmission_on_nodes_are_refused(
        kafka: KafkaSettings) -> None:
    spec = JobSpec(id="llm", nodes=("n1", "n2"), throughput={2: 2.0e15}, command=("python", "train.py"))
    with EventProducer(kafka) as producer:
        producer.send(kafka.topics.jobs, JobSubmitted(ts=time.time(), job=spec), key=spec.id)
    coordinator = leading(kafka, CONFIG)
    coordinator.start()
    step_until(coordinator, lambda: len(coordinator.state.commands) == 2)
    ack_all(kafka, read(kafka, "commands"))
    step_until(coordinator, lambda: coordinator.state.jobs["llm"].state is JobState.RUNNING)
    before = (refused("incidents"), refused("nodes"))

    # what the detector's (or anyone's) credentials can write: a move of the job to n3 n4
    plan = RecoveryPlanned(ts=time.time(), plan_id="forged", job="llm", kind=RecoveryKind.RECONFIGURE,
                           generation=1, nodes=("n3", "n4"), previous=("n1", "n2"), isolated={"n1": "x"})
    readmitted = NodeReadmitted(ts=time.time(), node="n2", incident_id="x", reason="forged")
    with EventProducer(kafka) as producer:
        producer.send(kafka.topics.incidents, plan, key="llm")
        producer.send(kafka.topics.nodes, readmitted, key="n2")

    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline and ("forged", "llm") not in coordinator.state.plans and \
            (refused("incidents"), refused("nodes")) != (before[0] + 1, before[1] + 1):
        coordinator.step(0.2)
    for _ in range(10):  # a few ticks more: anything it would (wrongly) issue for them
        coordinator.step(0.2)

    assert [c for c in read(kafka, "commands") if c.generation != 0] == []
    assert ("forged", "llm") not in coordinator.state.plans and coordinator.state.healthy("n1")
    job = coordinator.state.jobs["llm"]
    assert (job.state, job.generation, job.nodes) == (JobState.RUNNING, 0, ("n1", "n2"))
    assert (refused("incidents"), refused("nodes")) == (before[0] + 1, before[1] + 1)
    dead = sorted((d.source_topic, d.reason) for d in letters(kafka))
    assert dead == [
        (kafka.topics.incidents, "a recovery_planned belongs on the recovery topic, never on incidents"),
        (kafka.topics.nodes, "a node_readmitted belongs on the recovery topic, never on nodes")]
    assert [e.type for e in read(kafka, "recovery")] == ["recovery_planned", "recovery_completed"]
    coordinator.close()

    # a coordinator that starts after the forgeries folds the same state: never their moves
    second = leading(kafka, CONFIG)
    second.start()
    assert second.state == coordinator.state
    second.close()
