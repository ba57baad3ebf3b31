"""Against the real secure broker: each role may do what it must (bus/acls.py), and the broker
refuses it everything else; a client without credentials, or with a wrong password, gets nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import KafkaError as RdKafkaError
from confluent_kafka import TopicPartition
from pydantic import SecretStr

from trainmedic.bus import clients
from trainmedic.bus.admin import delete_topics, list_topics, revoke_roles
from trainmedic.bus.settings import KafkaSettings, credentials_dir
from trainmedic.bus.transactional import TransactionalProducer
from trainmedic.common.errors import KafkaError
from trainmedic.schemas import NodeHeartbeat

pytestmark = pytest.mark.kafka

REFUSED = "TOPIC_AUTHORIZATION_FAILED"


@pytest.fixture(autouse=True)
def secure_broker(kafka: KafkaSettings) -> None:
    assert (credentials_dir() / "admin.json").exists(), (
        f"no role credentials in {credentials_dir()}: these tests need the project's secure broker "
        "(`trainmedic broker start`), not a plain one")


def as_role(kafka: KafkaSettings, role: str) -> KafkaSettings:
    """`role`'s settings from its credentials file, on the test's prefix."""
    return KafkaSettings.from_env(role=role, bootstrap=kafka.bootstrap, topic_prefix=kafka.topic_prefix)


def write(settings: KafkaSettings, topic: str) -> str | None:
    """Produce one record; None when the broker took it, else the error's name."""
    errors: list[RdKafkaError] = []
    producer = clients.producer(settings, {"message.timeout.ms": 10_000, "enable.idempotence": True})
    producer.produce(topic, b"{}", key=b"k", partition=0, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(15)
    assert errors, "no delivery report within 15s"
    return None if errors[0] is None else errors[0].name()


def read(settings: KafkaSettings, topic: str, group: str, *, commit: bool = True) -> str | None:
    """Fetch from partition 0 (and commit for `group`); None when allowed, else the error's name."""
    answers: list = []  # the commit's outcome (an asynchronous commit: a synchronous one can wait forever
    # while librdkafka retries a coordinator lookup the group ACL refuses)
    # The group ACL's refusal comes as the commit's outcome or, when the coordinator lookup is what
    # the broker refused (librdkafka then answers the commit _WAIT_COORD only), as a client error.
    refusals: list[RdKafkaError] = []
    consumer = clients.consumer(settings, {"group.id": group, "auto.offset.reset": "earliest",
                                           "enable.auto.commit": False,
                                           "on_commit": lambda err, _parts: answers.append(err),
                                           "error_cb": refusals.append})
    try:
        # An assigned partition the role may not read is silently not fetched: its metadata says why.
        refused = consumer.list_topics(topic, timeout=10).topics[topic].error
        if refused is not None:
            return refused.name()
        consumer.assign([TopicPartition(topic, 0, 0)])
        for _ in range(20):
            msg = consumer.poll(0.5)
            err = None if msg is None else msg.error()
            if err is not None and err.code() != RdKafkaError._PARTITION_EOF:
                return err.name()
            if msg is not None and msg.error() is None:
                break
        if not commit:
            return None
        for _ in range(20):  # bounded: the group's coordinator may not be found yet (_WAIT_COORD)
            answers.clear()
            consumer.commit(asynchronous=True)
            deadline = time.monotonic() + 15
            while not answers and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is not None:
                    refusals.append(msg.error())
                if any(e.code() == RdKafkaError.GROUP_AUTHORIZATION_FAILED for e in refusals):
                    return "GROUP_AUTHORIZATION_FAILED"
            err = answers[0] if answers else None
            if not answers or (err is not None and err.name() == "_WAIT_COORD"):
                time.sleep(0.5)
                continue
            return None if err is None else err.name()  # the commit's refusal (group ACL) is the answer
        return "_WAIT_COORD"
    finally:
        consumer.close()


@pytest.mark.parametrize(("role", "suffix"), [
    ("agent", "telemetry.gpu"), ("agent", "telemetry.node"),
    ("detector", "incidents"), ("detector", "dlq"), ("coordinator", "commands"), ("coordinator", "dlq"),
    ("executor", "acks"), ("executor", "telemetry.worker"), ("executor", "dlq"),
    ("operator", "jobs"), ("operator", "nodes"), ("ops", "alerts"), ("ops", "dlq"),
])
def test_each_role_writes_its_topics(kafka: KafkaSettings, role: str, suffix: str) -> None:
    assert write(as_role(kafka, role), kafka.topics.name(suffix)) is None


@pytest.mark.parametrize(("role", "suffix"), [
    ("executor", "commands"),
    ("agent", "incidents"), ("agent", "telemetry.worker"), ("detector", "commands"), ("ops", "jobs"),
    ("ops", "commands"), ("operator", "commands"), ("operator", "incidents"), ("coordinator", "jobs"),
    ("coordinator", "acks"), ("executor", "incidents"),
])
def test_the_broker_refuses_a_write_the_role_must_not_make(kafka: KafkaSettings, role: str,
                                                            suffix: str) -> None:
    assert write(as_role(kafka, role), kafka.topics.name(suffix)) == REFUSED


def test_reads_and_groups_are_the_roles_own(kafka: KafkaSettings) -> None:
    topics, owned = kafka.topics, kafka.topics.owned
    for topic in (topics.commands, topics.gpu, topics.incidents):
        assert write(kafka, topic) is None  # a record to read and commit past
    # The executor reads its partition without a consumer group (its ledger keeps its place).
    assert read(as_role(kafka, "executor"), topics.commands, owned("executor-n1"), commit=False) is None
    assert read(as_role(kafka, "detector"), topics.gpu, owned("detector")) is None
    assert read(as_role(kafka, "ops"), topics.incidents, owned("alerts")) is None
    assert read(as_role(kafka, "agent"), topics.commands, owned("executor-n1"), commit=False) == REFUSED
    denied = "GROUP_AUTHORIZATION_FAILED"
    assert read(as_role(kafka, "ops"), topics.gpu,
                owned("alerts")) == REFUSED
    # Joining the coordinators' lease group would take the lease: only the coordinator may.
    assert read(as_role(kafka, "ops"), topics.incidents, owned("coordinator-lease")) == denied
    assert read(as_role(kafka, "detector"), topics.gpu, f"other-{uuid.uuid4().hex[:6]}") == denied


def test_only_the_coordinator_writes_in_its_transactions(kafka: KafkaSettings) -> None:
    beat = NodeHeartbeat(ts=1.0, node="n", interval=1.0)  # any record: the broker checks who, not what
    txn = kafka.topics.owned("coordinator")
    with TransactionalProducer(as_role(kafka, "coordinator"), transactional_id=txn) as producer:
        producer.init()
        with producer.transaction():
            producer.send(kafka.topics.commands, beat, key="n")
    intruder = TransactionalProducer(as_role(kafka, "executor"), transactional_id=txn)
    with pytest.raises(KafkaError, match="TRANSACTIONAL_ID_AUTHORIZATION_FAILED"):
        intruder.init()  # (a fatal error: this producer cannot even flush any more)


def test_a_client_without_credentials_or_with_a_wrong_password_is_refused(kafka: KafkaSettings) -> None:
    with pytest.raises(KafkaError):
        list_topics(KafkaSettings(bootstrap=kafka.bootstrap), timeout_s=3)
    agent = as_role(kafka, "agent")
    wrong = agent.model_copy(update={"secrets": {"sasl.password": SecretStr("not-the-password")}})
    with pytest.raises(KafkaError):
        list_topics(wrong, timeout_s=3)
    seen = {name for name in list_topics(agent) if name.startswith(kafka.topic_prefix)}
    assert seen == {kafka.topics.gpu, kafka.topics.node}  # the right one sees only what it may write


def test_the_retired_rank_principal_is_gone_with_its_acls(kafka: KafkaSettings) -> None:
    """Ranks held the `rank` user's password (any job could write any job's telemetry with it); the
    executor publishes for them now, and `broker start` deleted the user and its grants."""
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    from trainmedic.bus.acls import RETIRED
    from trainmedic.bus.clients import admin as admin_client

    assert RETIRED == ("rank",)
    client = admin_client(kafka)  # kept alive until the futures are done
    users = {name: future.result() for name, future in
             client.describe_user_scram_credentials(["rank", "executor"], request_timeout=10).items()
             if not isinstance(future.exception(), Exception)}
    assert "rank" not in users and "executor" in users
    anything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:rank", None,
                                AclOperation.ANY, AclPermissionType.ANY)
    assert client.describe_acls(anything, request_timeout=10).result() == []


def test_topics_create_grants_the_roles_for_its_prefix(kafka: KafkaSettings) -> None:
    prefix = f"g{uuid.uuid4().hex[:8]}."
    env = {**os.environ, "TRAINMEDIC_KAFKA_BOOTSTRAP": kafka.bootstrap}
    env.pop("TRAINMEDIC_TOPIC_PREFIX", None)
    done = subprocess.run([sys.executable, "-m", "trainmedic.cli", "topics", "create", "--prefix", prefix],
                          env=env, capture_output=True, text=True, timeout=120)
    admin = kafka.model_copy(update={"topic_prefix": prefix})
    try:
        assert done.returncode == 0, done.stderr
        assert f"ACLs to the roles for {prefix}*" in done.stdout
        agent = KafkaSettings.from_env(role="agent", bootstrap=kafka.bootstrap, topic_prefix=prefix)
        assert write(agent, agent.topics.gpu) is None
        assert write(agent, agent.topics.commands) == REFUSED
    finally:
        delete_topics(admin, [n for n in list_topics(admin) if n.startswith(prefix)])
        revoke_roles(admin, prefix)
