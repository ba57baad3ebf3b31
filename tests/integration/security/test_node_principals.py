"""One identity per node (issue 45, point 1), on the project's secure broker: `broker add-node` gives a
node its own principal and folder; what it writes about another node is refused by every detector
engine, what it writes about itself is used; it cannot write what acts; `remove-node` refuses its
writes at once.

Before: every node wrote as the shared `executor`/`agent` principals, and a `worker_error` written
with n1's credentials naming n3 was believed (an incident on n3's job, and in the red team's run two
of them isolated n3)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from tests.integration.security.test_broker_acls import REFUSED, write
from tests.integration.security.test_clock_skew import ENGINES, detector, logs, read, until  # noqa: F401
from trainmedic.bus import clients
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings, credentials_dir, home
from trainmedic.local import broker_nodes
from trainmedic.schemas import NodeHeartbeat, WorkerFailed

pytestmark = pytest.mark.kafka


def as_node(kafka: KafkaSettings, folder: Path, role: str = "executor") -> KafkaSettings:
    """A node part's settings from the folder `add-node` wrote, on the test's prefix."""
    return KafkaSettings.from_env({"TRAINMEDIC_CREDENTIALS_DIR": str(folder)}, role=role,
                                  bootstrap=kafka.bootstrap, topic_prefix=kafka.topic_prefix)


def failed(node: str, job: str) -> WorkerFailed:
    return WorkerFailed(ts=time.time(), node=node, job=job, rank=0, world_size=2,
                        error="RuntimeError: CUDA error: an illegal memory access was encountered")


@pytest.fixture
def nodes(kafka: KafkaSettings, tmp_path: Path):
    """`add(name)`: a node added on the session's broker for this test's prefix, its folder; removed after."""
    broker = broker_nodes.running(home(), credentials_dir())
    added: list[str] = []

    def add(name: str) -> Path:
        added.append(name)
        return broker_nodes.add(broker, name, (kafka.topic_prefix,), tmp_path / name)

    add.broker = broker
    yield add
    for name in added:
        broker_nodes.remove(broker, name)


@pytest.mark.parametrize("detector", sorted(ENGINES), indirect=True)
def test_a_node_speaks_for_itself_only(kafka: KafkaSettings, detector: Path, nodes) -> None:  # noqa: F811
    suffix = uuid.uuid4().hex[:6]
    n1, n3 = f"n1-{suffix}", f"n3-{suffix}"
    folder = nodes(n1)
    nodes(n3)
    assert {p.name for p in folder.iterdir()} >= {"executor.json", "agent.json", "telemetry.key"}
    assert all(p.stat().st_mode & 0o077 == 0 for p in folder.iterdir() if p.suffix in (".json", ".key"))
    executor = as_node(kafka, folder)
    assert executor.extra["sasl.username"] == f"node-{n1}" and executor.telemetry_key.node == n1
    with EventProducer(executor) as producer:
        producer.send(kafka.topics.worker, failed(n3, "job-on-n3"), key="job-on-n3")  # about another node
        producer.send(kafka.topics.worker, failed(n1, "job-on-n1"), key="job-on-n1")  # about itself
    with EventProducer(as_node(kafka, folder, "agent")) as producer:
        producer.send(kafka.topics.node, NodeHeartbeat(ts=time.time(), node=n3, interval=1.0), key=n3)

    dead = until(kafka, kafka.topics.dlq, lambda got: len(got) >= 2, 60)
    assert [d.reason for d in dead] == [
        f"unverified: not written by node '{n3}': its tm-mac is another key's"] * 2, logs(detector)
    found = until(kafka, kafka.topics.incidents, lambda got: got, 60)
    assert {(i.job, i.node) for i in found} == {("job-on-n1", n1)}, logs(detector)
    # its principal writes a node's topics, and nothing that acts
    assert write(executor, kafka.topics.commands) == REFUSED
    assert write(executor, kafka.topics.incidents) == REFUSED
    assert write(as_node(kafka, folder, "agent"), kafka.topics.jobs) == REFUSED
    quotas = nodes.broker.described_quotas(
        KafkaSettings.from_env(role="admin").secrets["sasl.password"].get_secret_value())
    assert quotas[f"node-{n1}"]["producer_byte_rate"] == 32 * 2 ** 20


def test_a_removed_nodes_writes_are_refused_within_seconds(kafka: KafkaSettings, nodes) -> None:
    """Its producer stays connected (authenticated before): the ACLs gone, its next write is refused."""
    name = f"gone-{uuid.uuid4().hex[:6]}"
    producer = clients.producer(as_node(kafka, nodes(name)), {"message.timeout.ms": 10_000})
    answers: list = []

    def send() -> None:
        producer.produce(kafka.topics.worker, b"{}", partition=0,
                         on_delivery=lambda err, _: answers.append(err))
        producer.flush(15)

    send()
    assert answers == [None]
    removed = time.monotonic()
    broker_nodes.remove(nodes.broker, name)
    while answers[-1] is None and time.monotonic() - removed < 10:
        send()
    took = time.monotonic() - removed
    assert answers[-1] is not None and answers[-1].name() == REFUSED
    assert took < 5, f"refused after {took:.1f}s"
