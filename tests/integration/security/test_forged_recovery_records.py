"""Forged coordinator decisions on its own `recovery` topic, and signed records of another deployment,
against the real coordinator on the real broker.

The broker's ACLs give `recovery` to the coordinator alone, but its super user writes anywhere: one
unsigned `recovery_skipped` naming every node isolated them all, with no cap, and an unsigned plan
moved a running job. And a record signed with the same keys for another deployment (another topic
prefix: a test cluster and production sharing an operator key) verified here. Now the coordinator
folds only the decisions its own key signed for this prefix, and only jobs signed for it, fresh:
the rest is dead-lettered with the reason and counted, live, and skipped after a restart.
"""

from __future__ import annotations

import time

import pytest
from prometheus_client import REGISTRY

from tests.integration.test_coordinator import Keys, leading, read, step_until
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.recovery import keyring
from trainmedic.recovery.coordinator.core import CoordinatorConfig, JobState, NodeConfig
from trainmedic.recovery.signing import Signable, SigningKey
from trainmedic.schemas import CommandAcked, JobSpec, JobSubmitted, RecoveryKind, RecoveryPlanned
from trainmedic.schemas.recovery import RecoverySkipped

pytestmark = pytest.mark.kafka

NODES = tuple(f"n{i}" for i in range(1, 6))
CONFIG = CoordinatorConfig(tick_s=0.2, ack_timeout_s=5.0, default_address="127.0.0.1",
                           nodes=tuple(NodeConfig(id=n, switch="leaf-1") for n in NODES))
LLM = JobSpec(id="llm", nodes=("n1", "n2"), throughput={2: 2.0e15}, command=("python", "train.py"))


def unverified(kind: str, reason: str) -> float:
    return REGISTRY.get_sample_value("trainmedic_coordinator_unverified_records_total",
                                     {"type": kind, "reason": reason}) or 0.0


def signed(key: SigningKey, event: Signable, deployment: str) -> Signable:
    """`event` signed by `key` for the deployment of topic prefix `deployment`."""
    return key.sign(event.model_copy(update={"deployment": deployment}))


def key(keys: Keys, role: str = keyring.COORDINATOR) -> SigningKey:
    """The signing key of `role` in the folder of `keys`, as its owner loads it."""
    return keyring.load_signing(keys.folder, role)


def publish(kafka: KafkaSettings, topic: str, *events) -> None:
    with EventProducer(kafka) as producer:
        for event in events:
            key = getattr(event, "node", None) or getattr(event, "job", None) or "cluster"
            producer.send(topic, event, key=key if isinstance(key, str) else key.id)


def running(kafka: KafkaSettings, keys: Keys):
    """A coordinator that checks every signature, with job llm running on n1 n2 (acked by its nodes)."""
    here = kafka.topic_prefix
    publish(kafka, kafka.topics.jobs,
            signed(key(keys, keyring.OPERATOR), JobSubmitted(ts=time.time(), job=LLM), here))
    coordinator = leading(kafka, CONFIG, sign=key(keys).sign, trust=keys.trust)
    coordinator.start()
    step_until(coordinator, lambda: len(coordinator.state.commands) == 2)
    publish(kafka, kafka.topics.acks, *(
        signed(key(keys, keyring.node_role(c.node)),
               CommandAcked(ts=time.time(), node=c.node, command_id=c.id, job=c.job, generation=c.generation,
                            status="done"), here)
        for c in read(kafka, "commands")))
    step_until(coordinator, lambda: coordinator.state.jobs["llm"].state is JobState.RUNNING)
    return coordinator


def test_an_unsigned_or_foreign_decision_on_recovery_isolates_and_moves_nothing(
        kafka: KafkaSettings, tmp_path) -> None:
    keys = Keys(tmp_path / "keys")
    coordinator = running(kafka, keys)
    counted = {("recovery_skipped", "unsigned"): 1, ("recovery_planned", "unsigned"): 1,
               ("recovery_planned", "other_deployment"): 1}
    before = {label: unverified(*label) for label in counted}

    # the broker's super user: every node isolated in one record, and the job moved to n3 n4
    everyone = RecoverySkipped(ts=time.time(), incident_id="forged", reason="forged",
                               isolated={n: "forged" for n in NODES})
    move = RecoveryPlanned(ts=time.time(), plan_id="forged", job="llm", kind=RecoveryKind.RECONFIGURE,
                           generation=1, nodes=("n3", "n4"), previous=("n1", "n2"), isolated={"n1": "forged"})
    # the coordinator's own key, but for another deployment: a decision of a test cluster replayed here
    elsewhere = signed(key(keys), move.model_copy(update={"plan_id": "elsewhere"}), "prod.")
    publish(kafka, kafka.topics.recovery, everyone, move, elsewhere)

    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline and any(
            unverified(*label) < before[label] + n for label, n in counted.items()):
        coordinator.step(0.2)
    for _ in range(10):  # a few ticks more: anything it would (wrongly) issue for them
        coordinator.step(0.2)

    state = coordinator.state
    assert sorted(state.isolated) == [] and all(state.healthy(n) for n in NODES)
    assert [c for c in read(kafka, "commands") if c.generation != 0] == []
    job = state.jobs["llm"]
    assert (job.state, job.generation, job.nodes) == (JobState.RUNNING, 0, ("n1", "n2"))
    assert {label: unverified(*label) - before[label] for label in counted} == counted
    reasons = sorted(d.reason for d in read(kafka, "dlq") if d.source_topic == kafka.topics.recovery)
    assert reasons == [
        "recovery_planned not signed by this coordinator, not folded: other deployment: the decision "
        f"was signed for deployment 'prod.', this is '{kafka.topic_prefix}'",
        "recovery_planned not signed by this coordinator, not folded: unsigned: the decision carries no "
        "signature",
        "recovery_skipped not signed by this coordinator, not folded: unsigned: the decision carries no "
        "signature"]
    assert {d.source_topic for d in read(kafka, "dlq")} == {kafka.topics.recovery}  # its own verify
    coordinator.close()

    # a coordinator that starts after the forgeries folds the same state: its own decisions, only
    second = leading(kafka, CONFIG, sign=key(keys).sign, trust=keys.trust)
    second.start()
    assert second.state == coordinator.state
    second.close()


def test_a_job_signed_for_another_deployment_or_long_ago_starts_nothing(
        kafka: KafkaSettings, deployment, tmp_path) -> None:
    keys = Keys(tmp_path / "keys")
    other = deployment()  # a test cluster on the same broker, its operator's key the same
    spec = LLM.model_copy(update={"id": "test-run", "nodes": ("n5",), "throughput": {1: 1.0e15}})
    operator = key(keys, keyring.OPERATOR)
    publish(other, other.topics.jobs, signed(operator, JobSubmitted(ts=time.time(), job=spec),
                                             other.topic_prefix))
    replayed = read(other, "jobs")[0]  # as captured there, byte for byte the same fields and signature
    old = signed(operator, JobSubmitted(ts=time.time() - 2 * 3600, job=spec.model_copy(
        update={"id": "old-run"})), kafka.topic_prefix)
    before = unverified("job_submitted", "other_deployment"), unverified("job_submitted", "stale")

    coordinator = running(kafka, keys)
    publish(kafka, kafka.topics.jobs, replayed, old,
            signed(operator, JobSubmitted(ts=time.time(), job=spec.model_copy(update={"id": "fresh"})),
                   kafka.topic_prefix))  # after them on the one partition: read means they were
    step_until(coordinator, lambda: "fresh" in coordinator.state.jobs)
    for _ in range(5):
        coordinator.step(0.2)

    assert set(coordinator.state.jobs) == {"llm", "fresh"}
    assert {c.job for c in read(kafka, "commands")} == {"llm", "fresh"}
    assert unverified("job_submitted", "other_deployment") == before[0] + 1
    assert unverified("job_submitted", "stale") == before[1] + 1
    reasons = [d.reason for d in read(kafka, "dlq") if d.source_topic == kafka.topics.jobs]
    assert len(reasons) == 2
    assert ("job submission not signed by a trusted operator key, not started: other deployment: the job "
            f"submission was signed for deployment '{other.topic_prefix}', this is '{kafka.topic_prefix}'"
            in reasons)
    assert any(r.startswith("job submission not started: stale: old-run says") for r in reasons)
    coordinator.close()

    # the broker's time of each record decides freshness, so a restart folds the same jobs
    second = leading(kafka, CONFIG, sign=key(keys).sign, trust=keys.trust)
    second.start()
    assert set(second.state.jobs) == {"llm", "fresh"} and second.state == coordinator.state
    second.close()
