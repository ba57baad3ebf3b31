"""The coordinator through a real broker: a submitted job starts, a SEV1 moves it, a restart
rebuilds the same state, sends no command twice, and fences the instance it replaced."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from trainmedic.bus.producer import EventProducer
from trainmedic.bus.reader import NOW, TopicReader
from trainmedic.bus.settings import KafkaSettings
from trainmedic.bus.transactional import Fenced, TransactionalProducer
from trainmedic.cli import main
from trainmedic.recovery import keyring
from trainmedic.recovery.coordinator.core import CoordinatorConfig, JobState, NodeConfig
from trainmedic.recovery.coordinator.kafka_adapter import CoordinatorService
from trainmedic.recovery.coordinator.lease import Lease
from trainmedic.recovery.coordinator.provenance import Trust
from trainmedic.recovery.signing import SigningKey
from trainmedic.schemas import Command, CommandAcked, Incident, JobSpec, JobSubmitted

pytestmark = pytest.mark.kafka

CONFIG = CoordinatorConfig(
    tick_s=0.2, nodes=tuple(NodeConfig(id=f"n{i}", switch="leaf-1" if i <= 3 else "leaf-2")
                            for i in range(1, 6)),
    default_address="127.0.0.1",
)
SPEC = """\
id: llm
nodes: [n1, n2, n3]
throughput: {2: 2.0e15, 3: 3.0e15}
command: [python, train.py]
ranks_per_node: 2
master_port: 29611
checkpoint_dir: /ckpt/llm
"""


def sign(record):
    """A stand-in for the coordinator's key, for a coordinator that checks no signature: it marks
    every record it writes, commands by their id."""
    return record.model_copy(update={"signature": f"test-signature:{getattr(record, 'id', record.type)}"})


def read(kafka: KafkaSettings, suffix: str) -> list:
    with TopicReader(kafka, [kafka.topics.name(suffix)], end=NOW, validate=True) as reader:
        return [r.event for batch in reader.batches() for r in batch]


ROOT = bytes(32)  # the root of every generation's rendezvous secret (a real one derives it from its key)


def leading(kafka: KafkaSettings, config: CoordinatorConfig = CONFIG, *, sign=sign,
            trust: Trust | None = None) -> CoordinatorService:
    """A coordinator that took the lease's epoch, as `lead` makes one (the consumer-group part of
    the lease is tested in tests/integration/chaos/test_coordinator_failover.py). Without `trust` it
    folds unsigned records, as `--insecure` does."""
    producer = TransactionalProducer(kafka, transactional_id=kafka.topics.owned("coordinator"))
    return CoordinatorService(kafka, config, sign=sign, trust=trust, producer=producer,
                              epoch=Lease(kafka).take(producer), rendezvous_root=ROOT)


@dataclass(frozen=True)
class ForDeployment:
    """A signing key that signs each record for one deployment (its topic prefix), as the CLIs and
    executors sign what they write there."""

    key: SigningKey
    deployment: str | None

    @property
    def key_id(self) -> str:
        return self.key.key_id

    def sign(self, record):
        if self.deployment is None:
            return self.key.sign(record)
        return self.key.sign(record.model_copy(update={"deployment": self.deployment}))


class Keys:
    """A keys folder with a key of every role, as `trainmedic keys generate` writes it, and what a
    test that writes jobs, node events or acks straight to Kafka signs them with, for the deployment
    of topic prefix `deployment` (for none: a coordinator that checks no signature)."""

    def __init__(self, folder: Path, nodes: Iterable[str] = tuple(f"n{i}" for i in range(1, 10)), *,
                 deployment: str | None = None) -> None:
        roles = [keyring.COORDINATOR, keyring.OPERATOR, *(keyring.node_role(n) for n in nodes)]
        for role in roles:
            keyring.ensure_key(folder, time.time(), role)
        self.folder = folder
        self.coordinator = ForDeployment(keyring.load_signing(folder), deployment)
        self.operator = ForDeployment(keyring.load_signing(folder, keyring.OPERATOR), deployment)
        self.nodes = {role.removeprefix(keyring.NODE): ForDeployment(keyring.load_signing(folder, role),
                                                                      deployment)
                      for role in roles[2:]}
        self.trust = Trust.of(keyring.load_roles(folder))

    def job(self, spec: JobSpec, ts: float | None = None) -> JobSubmitted:
        return self.operator.sign(JobSubmitted(ts=time.time() if ts is None else ts, job=spec))


def step_until(service: CoordinatorService, done, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "the coordinator did not get there in time"
        service.step(0.2)


def ack_all(kafka: KafkaSettings, commands: list[Command], keys: Keys | None = None) -> None:
    """`done` for each command, as its node's executor answers it: signed with the node's key from
    `keys` (unsigned without, for a coordinator that folds unsigned acks)."""
    with EventProducer(kafka) as producer:
        for c in commands:
            ack = CommandAcked(ts=time.time(), node=c.node, command_id=c.id, job=c.job,
                               generation=c.generation, status="done")
            signed = ack if keys is None else keys.nodes[c.node].sign(ack)
            producer.send(kafka.topics.acks, signed, key=c.node)


def test_node_sev1s_are_decided_when_their_window_ends_not_at_the_next_tick(kafka: KafkaSettings) -> None:
    # A tick far away: the plan can come only from the group window's own end.
    service = leading(kafka, CONFIG.model_copy(update={"tick_s": 30.0, "group_window_s": 0.5}))
    service.start()
    with EventProducer(kafka) as producer:
        producer.send(kafka.topics.jobs, JobSubmitted(ts=time.time(), job=JobSpec.model_validate(
            yaml.safe_load(SPEC))), key="llm")
    step_until(service, lambda: len(service.state.commands) == 3)
    ack_all(kafka, read(kafka, "commands"))
    step_until(service, lambda: service.state.jobs["llm"].state is JobState.RUNNING)
    with EventProducer(kafka) as producer:
        producer.send(kafka.topics.incidents, Incident(
            ts=time.time(), id="inc-gpu-lost-n2", status="open", category="gpu_lost", severity="SEV1",
            action="reconfigure", job="llm", node="n2", ranks=(2, 3), first_ts=time.time(),
            evidence=("Xid 79 on gpu 3",)), key="llm")
    step_until(service, lambda: "inc-gpu-lost-n2" in service.state.incidents)
    received = service.state.received(service.state.incidents["inc-gpu-lost-n2"])
    step_until(service, lambda: not service.state.nodes["n2"].healthy, timeout_s=10.0)
    planned = next(e for e in read(kafka, "recovery") if e.type == "recovery_planned" and e.generation == 1)
    assert planned.ts >= received + 0.5  # the window was kept
    service.close()


@pytest.fixture
def env(kafka: KafkaSettings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> KafkaSettings:
    """The CLIs' environment: this test's broker and topics, and a TRAINMEDIC_HOME whose keys folder
    holds a key of every role (`keys`), so that `job submit` and `nodes cordon` sign as an operator."""
    monkeypatch.setenv("TRAINMEDIC_KAFKA_BOOTSTRAP", kafka.bootstrap)
    monkeypatch.setenv("TRAINMEDIC_TOPIC_PREFIX", kafka.topic_prefix)
    monkeypatch.setenv("TRAINMEDIC_HOME", str(tmp_path / "home"))
    Keys(tmp_path / "home" / "keys", deployment=kafka.topic_prefix)
    return kafka


@pytest.fixture
def keys(env: KafkaSettings, tmp_path: Path) -> Keys:
    """The keys of `env`'s TRAINMEDIC_HOME."""
    return Keys(tmp_path / "home" / "keys", deployment=env.topic_prefix)


def test_submit_start_sev1_kill_restart(env: KafkaSettings, tmp_path, capsys) -> None:
    kafka = env
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    (tmp_path / "train.py").write_text("")
    assert main(["job", "submit", str(spec), "--allow-unknown-nodes", "--wait", "0"]) == 0  # none runs yet

    first = leading(kafka)
    first.start()
    step_until(first, lambda: len(first.state.commands) == 3)
    starts = read(kafka, "commands")
    assert sorted((c.node, c.action, c.generation) for c in starts) == [
        ("n1", "start", 0), ("n2", "start", 0), ("n3", "start", 0)]
    assert all(c.signature == f"test-signature:{c.id}" for c in starts)
    assert {c.epoch for c in starts} == {first.epoch}
    assert {c.worker.master_addr for c in starts} == {"127.0.0.1"}

    ack_all(kafka, starts)
    step_until(first, lambda: first.state.jobs["llm"].state is JobState.RUNNING)

    with EventProducer(kafka) as producer:  # a hand-written SEV1, as the detector would send it
        producer.send(kafka.topics.incidents, Incident(
            ts=time.time(), id="inc-gpu-lost-n2", status="open", category="gpu_lost", severity="SEV1",
            action="reconfigure", job="llm", node="n2", ranks=(2, 3), first_ts=time.time() - 2,
            evidence=("Xid 79 on gpu 3",)), key="llm")
    step_until(first, lambda: len(first.state.commands) == 7)
    moved = [c for c in read(kafka, "commands") if c.generation == 1]
    assert sorted((c.node, c.action) for c in moved) == [
        ("n1", "restart"), ("n2", "stop"), ("n3", "restart"), ("n4", "start")]
    n4 = next(c for c in moved if c.node == "n4")
    assert (n4.worker.ranks, n4.worker.world_size) == ((4, 5), 6)
    assert 29611 <= n4.worker.master_port < 29611 + 1024  # the generation's own port
    assert n4.worker.restore.kind == "replica" and n4.worker.restore.node == "n1"
    lifecycle = [e.type for e in read(kafka, "recovery")]
    assert lifecycle.count("recovery_planned") == 2 and lifecycle.count("recovery_completed") == 1
    assert [e.type for e in read(kafka, "incidents")] == ["incident"]  # the detector's topic: its own only

    # killed: nothing more from it, no goodbye
    before = read(kafka, "commands")
    first._reader.close()

    second = leading(kafka)
    assert second.epoch > first.epoch
    second.start()
    for _ in range(5):
        second.step(0.2)
    assert second.state == first.state
    assert sorted((c.id, c.ts) for c in read(kafka, "commands")) == sorted((c.id, c.ts) for c in before)

    with pytest.raises(Fenced):  # the replaced instance, had it lived on, can write nothing more
        first._publish("a zombie's late decision", [before[0]])
    ack_all(kafka, [c for c in moved if c.node != "n2"])
    step_until(second, lambda: second.state.jobs["llm"].state is JobState.RUNNING)
    second.close()

    capsys.readouterr()
    assert main(["job", "list"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split() == ["llm", "running", "1", "6", "n1", "n3", "n4"]
