"""The attacker's means: how each attack writes its forgery, and how the suite sees it refused.

A write the broker refuses (`broker_refuses`), a record the coordinator dead-letters
(`dead_letter`), a command an executor acks `refused` (`command_refused`); and the forgeries the
attacks are made of, built from what the log already holds.
"""

from __future__ import annotations

import time
import uuid

from prometheus_client import REGISTRY

from tests.helpers.waiting import wait_until
from tests.integration.security.attack_stack import Stack
from trainmedic.bus import clients
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import home
from trainmedic.schemas import Command, CommandAcked, Incident, RecoveryKind, RecoveryPlanned


def unverified(kind: str, reason: str) -> tuple[str, dict[str, str]]:
    return "trainmedic_coordinator_unverified_records_total", {"type": kind, "reason": reason}


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def broker_refuses(s: Stack, role: str, suffix: str, event) -> None:
    """`role`'s principal writes `event` to `suffix`: the broker must refuse it, and log the denial."""
    log = home() / "broker" / "broker.log"
    start = log.stat().st_size
    errors: list = []
    producer = clients.producer(s.as_role(role), {"message.timeout.ms": 10_000})
    producer.produce(s.admin.topics.name(suffix), event.model_dump_json().encode(), key=b"k",
                     on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(15)
    assert errors and errors[0] is not None, f"the broker took {role}'s write to {suffix}"
    assert errors[0].name() == "TOPIC_AUTHORIZATION_FAILED", errors[0]

    def denied() -> bool:
        with open(log, "rb") as f:
            f.seek(start)
            return f"Principal = User:{role} is Denied".encode() in f.read()
    wait_until(denied, 10.0, f"the broker's log names {role}'s denied write")


def dead_letter(s: Stack, suffix: str, event, *, role: str, key: str, reason: str,
                counter: tuple[str, dict[str, str]]) -> None:
    """`role` writes `event` where it may: the coordinator must dead-letter it with `reason`, count it."""
    name, labels = counter
    before = metric(name, **labels)
    topic = s.admin.topics.name(suffix)

    def letters() -> int:
        return len([d for d in s.read("dlq") if d.source_topic == topic and reason in d.reason])
    already = letters()
    with EventProducer(s.as_role(role)) as producer:
        producer.send(topic, event, key=key)
    wait_until(lambda: letters() > already, 30.0, f"{reason!r} in the dlq")
    wait_until(lambda: metric(name, **labels) > before, 10.0, f"{name}{labels} counted")


def command_refused(s: Stack, command: Command, reason: str, counter: str | None = None, *,
                    ack_id: str | None = None) -> None:
    """`command` written with the coordinator's Kafka principal (stolen; not its key): the node's
    executor must ack it `refused` with `reason`, counted."""
    before = metric("trainmedic_executor_acks_total", status="refused")
    counted = metric(counter) if counter else 0.0
    with EventProducer(s.as_role("coordinator")) as producer:
        producer.send(s.admin.topics.commands, command, key=command.node)
    ack_id = ack_id or command.id
    acks = wait_until(lambda: [a for a in s.read("acks")  # acks only: nodes report their joins here too
                               if a.type == "ack" and a.command_id == ack_id and a.status == "refused"],
                      30.0, f"{ack_id} refused")
    assert reason in acks[0].reason, acks[0].reason
    assert metric("trainmedic_executor_acks_total", status="refused") > before
    if counter:
        assert metric(counter) > counted


def legit_start(s: Stack, node: str) -> tuple[Command, bytes]:
    """The coordinator's signed start of the job on `node`, as the log holds it (object and bytes)."""
    record = next(r for r in s.raw("commands") if r.event.node == node and r.event.action == "start"
                  and r.event.job == "llm" and r.event.signature)
    return record.event, record.value


def forged_plan() -> RecoveryPlanned:
    return RecoveryPlanned(ts=time.time(), plan_id=f"forged-{uuid.uuid4().hex[:6]}", job="llm",
                           kind=RecoveryKind.RECONFIGURE, generation=1, nodes=("n3", "n2"),
                           previous=("n1", "n2"), isolated={"n1": "x"})


def sev1(node: str) -> Incident:
    return Incident(ts=time.time(), id=f"inc-forged-{uuid.uuid4().hex[:6]}", status="open",
                    category="gpu_lost", severity="SEV1", action="reconfigure", job="llm", node=node,
                    ranks=(0,), first_ts=time.time(), evidence=("Xid 79 (forged)",))


def evil_start(s: Stack, node: str = "n3", **changes) -> Command:
    base = legit_start(s, "n1")[0]
    return base.model_copy(update={
        "id": f"evil-{uuid.uuid4().hex[:8]}", "ts": time.time(), "node": node, "job": "evil",
        "signature": None, "key_id": None, "worker": base.worker.model_copy(update={"command": s.evil()}),
        **changes})


def planted_ack(s: Stack, node: str, status: str) -> CommandAcked:
    c = legit_start(s, node)[0]
    return CommandAcked(ts=time.time(), node=node, command_id=c.id, job=c.job, generation=c.generation,
                        status=status, reason="planted")

