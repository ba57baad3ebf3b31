"""Forged acks against the real coordinator on the real broker.

A command's id is predictable and its node, job, generation and time are on the commands
topic for anyone to read, so an ack that names them all (the fold's binding, `unbound`) is
easy to plant. Only an ack signed by its own node's key is folded: an unsigned `failed`, one
signed by another node's key or an unknown key, and an unsigned `done` are dead-lettered with
the reason and counted, and nothing is isolated, re-planned or completed. The node's real,
signed answers then complete the start, so "nothing happened" is not "not read yet".
"""

from __future__ import annotations

import time

import pytest
from prometheus_client import REGISTRY

from tests.integration.test_coordinator import Keys, ack_all, leading, read, step_until
from trainmedic.bus.producer import EventProducer
from trainmedic.recovery.coordinator.core import CommandStatus, CoordinatorConfig, JobState, NodeConfig
from trainmedic.recovery.signing import generate
from trainmedic.schemas import CommandAcked, JobSpec

pytestmark = pytest.mark.kafka

CONFIG = CoordinatorConfig(tick_s=0.2, ack_timeout_s=20.0, default_address="127.0.0.1", group_window_s=0.0,
                           nodes=tuple(NodeConfig(id=f"n{i}", switch="leaf-1") for i in range(1, 6)))


def unverified(reason: str) -> float:
    return REGISTRY.get_sample_value("trainmedic_coordinator_unverified_records_total",
                                     {"type": "ack", "reason": reason}) or 0.0


def test_forged_failed_and_done_acks_isolate_nothing_and_complete_nothing(kafka, tmp_path) -> None:
    keys = Keys(tmp_path / "keys", deployment=kafka.topic_prefix)
    before = {reason: unverified(reason) for reason in ("unsigned", "wrong_node", "unknown_key")}
    spec = JobSpec(id="llm", nodes=("n1", "n2"), throughput={1: 1.0e15, 2: 2.0e15},  # it could shrink
                   command=("python", "train.py"))
    with EventProducer(kafka) as producer:
        producer.send(kafka.topics.jobs, keys.job(spec), key=spec.id)
    coordinator = leading(kafka, CONFIG, sign=keys.coordinator.sign, trust=keys.trust)
    coordinator.start()
    step_until(coordinator, lambda: len(coordinator.state.commands) == 2)
    starts = {c.node: c for c in read(kafka, "commands")}

    def answer(node: str, status: str) -> CommandAcked:  # everything the binding checks, right
        c = starts[node]
        return CommandAcked(ts=time.time(), node=c.node, command_id=c.id, job=c.job, generation=c.generation,
                            status=status, reason="planted")
    forged = [answer("n1", "failed"),  # unsigned
              keys.nodes["n2"].sign(answer("n1", "failed")),  # another node's key answering for n1
              generate().sign(answer("n1", "failed")),  # a key nobody trusts
              answer("n2", "done")]  # unsigned
    with EventProducer(kafka) as producer:
        for ack in forged:
            producer.send(kafka.topics.acks, ack, key=ack.node)
    def settled() -> bool:  # all four refused, or (the failure this test is for) one folded
        refused = [d for d in read(kafka, "dlq") if d.source_topic == kafka.topics.acks]
        return len(refused) == 4 or any(r.status is not CommandStatus.ISSUED
                                        for r in coordinator.state.commands.values())
    step_until(coordinator, settled)
    for _ in range(5):
        coordinator.step(0.2)

    state = coordinator.state
    assert {r.status for r in state.commands.values()} == {CommandStatus.ISSUED}
    assert state.jobs["llm"].state is JobState.STARTING and state.jobs["llm"].generation == 0
    assert all(state.healthy(n) for n in ("n1", "n2", "n3", "n4", "n5"))
    assert len(read(kafka, "commands")) == 2  # no re-plan, no stop
    assert [e.type for e in read(kafka, "recovery")] == ["recovery_planned"]  # the start, nothing since
    reasons = sorted(d.reason for d in read(kafka, "dlq") if d.source_topic == kafka.topics.acks)
    assert all(r.startswith("ack not signed by its node's key, ignored: ") for r in reasons)
    assert sum("unsigned: the ack carries no signature" in r for r in reasons) == 2
    assert sum("wrong node: an ack from n1 signed by the key of node n2" in r for r in reasons) == 1
    assert sum("unknown key id" in r for r in reasons) == 1
    assert {reason: unverified(reason) - before[reason] for reason in before} == {
        "unsigned": 2, "wrong_node": 1, "unknown_key": 1}

    ack_all(kafka, list(starts.values()), keys)  # the nodes' own answers
    step_until(coordinator, lambda: coordinator.state.jobs["llm"].state is JobState.RUNNING)
    assert {r.status for r in coordinator.state.commands.values()} == {CommandStatus.DONE}
    assert {d.source_topic for d in read(kafka, "dlq")} == {kafka.topics.acks}
    coordinator.close()
