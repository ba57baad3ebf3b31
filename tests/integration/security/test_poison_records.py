"""Poison never stops a service: oversized, deeply nested and binary records on every consumed topic.

Each poison is written with the credentials of a role that may write its topic (the broker takes
it), then a valid record after it. The real service must stay up, process the valid record, and
leave on the dlq a capped letter per poison: its reason, the whole value's size and SHA-256, the
value cut to what fits (docs/security.md, "Poison records"). Before the cap, a letter kept a value
twice (base64 and text): the oversized record's letter was over the producer's 1 MB limit, and
the detector, the coordinator and the alert bridge stopped on it; an executor lost it.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from pydantic import BaseModel

import trainmedic.schemas as s
from tests.integration.executor.conftest import KEY, POLICY, TRUSTED, RunningExecutor, node_key
from tests.integration.test_coordinator import leading
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.reader import NOW, TopicReader
from trainmedic.bus.settings import KafkaSettings
from trainmedic.ops.alerts.bridge import AlertBridge
from trainmedic.ops.alerts.config import AlertBridgeConfig
from trainmedic.ops.alerts.http import Outcome, Result
from trainmedic.recovery.coordinator.core import CoordinatorConfig, NodeConfig
from trainmedic.recovery.coordinator.core.state import NodeMode
from trainmedic.recovery.executor.config import ExecutorConfig
from trainmedic.schemas.dlq import MAX_LETTER_BYTES, VALUE_KEPT_BYTES
from trainmedic.streams.core import Detector
from trainmedic.streams.engines.consumer import DetectorService, ServiceConfig
from trainmedic.streams.live import LiveDetector
from trainmedic.streams.pipeline import Pipeline

pytestmark = pytest.mark.kafka

NODES = ("n1", "n2", "n3")
CONFIG = CoordinatorConfig(tick_s=0.2, ack_timeout_s=30.0, default_address="127.0.0.1",
                           nodes=tuple(NodeConfig(id=n, switch="leaf-1") for n in NODES))


def poisons() -> list[bytes]:
    """Oversized (its letter kept whole was 1.4 MB), deeply nested JSON, and binary."""
    return [b'{"type":"x","blob":"' + b"x" * 600_000 + b'"}',
            b'{"type":"x","a":' + b"[" * 200_000 + b"]" * 200_000 + b"}",
            os.urandom(300_000)]


Where = tuple[str, int, int]  # topic, partition, offset


def write(settings: KafkaSettings, suffix: str, key: str,
          values: list[BaseModel | bytes]) -> dict[Where, bytes]:
    """Write `values` to a topic as the role of `settings`, in order; where each landed (poison only)."""
    landed: dict[Where, bytes] = {}
    topic = settings.topics.name(suffix)
    with EventProducer(settings) as out:
        for value in values:
            def delivered(err, msg, value=value) -> None:
                assert err is None, err
                if isinstance(value, bytes):
                    landed[(msg.topic(), msg.partition(), msg.offset())] = value
            out.send(topic, value, key=key, on_delivery=delivered)
    assert len(landed) == sum(isinstance(v, bytes) for v in values)
    return landed


def as_role(admin: KafkaSettings, role: str) -> KafkaSettings:
    return KafkaSettings.from_env(role=role, bootstrap=admin.bootstrap, topic_prefix=admin.topic_prefix)


def letters(admin: KafkaSettings) -> dict[Where, s.DeadLettered]:
    with TopicReader(admin, [admin.topics.dlq], end=NOW, validate=True) as reader:
        read = [r for batch in reader.batches() for r in batch]
    return {(r.event.source_topic, r.event.partition, r.event.offset): r for r in read}


def until(done: Callable[[], bool], alive: Callable[[], None], give_up_s: float = 90.0) -> None:
    deadline = time.monotonic() + give_up_s
    while not done():
        alive()
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.2)


def check_letters(admin: KafkaSettings, poisoned: dict[Where, bytes], alive: Callable[[], None]) -> None:
    """Every poison has its capped letter on the dlq: reason, size and hash of the whole value."""
    found: dict = {}

    def all_there() -> bool:
        found.update(letters(admin))
        return poisoned.keys() <= found.keys()

    until(all_there, alive)
    for where, value in poisoned.items():
        record = found[where]
        letter = record.event
        assert len(record.value) <= MAX_LETTER_BYTES, where
        assert letter.reason and letter.value_size == len(value), where
        assert letter.value_sha256 == hashlib.sha256(value).hexdigest(), where
        assert letter.truncated == (len(value) > VALUE_KEPT_BYTES) and value.startswith(letter.raw_value())


class Running:
    """A service's loop in a thread until `stop()`; `alive()` raises what stopped it."""

    def __init__(self, loop: Callable[[Callable[[], bool]], None]) -> None:
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(loop,), daemon=True)
        self._thread.start()

    def _run(self, loop) -> None:
        try:
            loop(self._stop.is_set)
        except BaseException as err:  # kept for the test to see
            self.error = err

    def alive(self) -> None:
        assert self.error is None, f"the service stopped: {self.error!r}"
        assert self._thread.is_alive(), "the service stopped"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert self.error is None, self.error


def stepping(step: Callable[[], None]) -> Callable[[Callable[[], bool]], None]:
    """A service's `step`, as a loop until `stopping()`."""
    def loop(stopping: Callable[[], bool]) -> None:
        while not stopping():
            step()
    return loop


def incident() -> s.Incident:
    return s.Incident(ts=time.time(), id=f"inc-{uuid.uuid4().hex[:6]}", status="open", category="gpu_lost",
                      severity="SEV1", action="reconfigure", job="llm", node="n1", ranks=(0,),
                      first_ts=time.time(), evidence=("Xid 79",))


@pytest.fixture
def admin(kafka: KafkaSettings) -> KafkaSettings:
    return kafka


def test_the_detector_keeps_detecting(admin: KafkaSettings) -> None:
    detector = as_role(admin, "detector")
    pipeline = Pipeline(detector.topics, LiveDetector(Detector()))
    service = DetectorService(detector, pipeline, ServiceConfig(app_id=f"{admin.topic_prefix}detector",
                                                                start="earliest"))
    running = Running(service.run)
    try:
        until(lambda: len(service.offsets) == 6, running.alive)  # ready: 3 topics of 2 partitions
        now = time.time()
        valid = {"telemetry.gpu": s.GpuSample(ts=now, node="n1", gpu=0),
                 "telemetry.node": s.NodeHeartbeat(ts=now, node="n1", interval=1.0),
                 "telemetry.worker": s.WorkerStarted(ts=now, node="n1", job="j", rank=0, world_size=1)}
        poisoned: dict[Where, bytes] = {}
        for suffix, role, key in [("telemetry.gpu", "agent", "n1"), ("telemetry.node", "agent", "n1"),
                                  ("telemetry.worker", "executor", "j")]:
            poisoned |= write(as_role(admin, role), suffix, key, [*poisons(), valid[suffix]])
        check_letters(admin, poisoned, running.alive)
        until(lambda: pipeline.stats.events == 3, running.alive)  # every valid record, fed to the core
        running.alive()
    finally:
        running.stop()


def test_the_coordinator_keeps_folding(admin: KafkaSettings) -> None:
    # folds unsigned records and signs nothing, as `--insecure` does
    coordinator = leading(as_role(admin, "coordinator"), CONFIG, sign=lambda event: event)
    coordinator.start()
    running = Running(stepping(lambda: coordinator.step(0.2)))
    try:
        poisoned: dict[Where, bytes] = {}
        writers = [("incidents", "detector", "j"), ("jobs", "operator", "j"), ("nodes", "operator", "n1"),
                   ("acks", "executor", "n1"), ("commands", "coordinator", "n1"),
                   ("recovery", "coordinator", "j")]
        for suffix, role, key in writers:
            poisoned |= write(as_role(admin, role), suffix, key, poisons())
        check_letters(admin, poisoned, running.alive)
        # then valid records on the topics of others, each folded
        spec = s.JobSpec(id="llm", nodes=("n1",), throughput={1: 1.0e15}, command=("sleep", "60"))
        write(as_role(admin, "operator"), "jobs", "llm", [s.JobSubmitted(ts=time.time(), job=spec)])
        write(as_role(admin, "operator"), "nodes", "n3", [s.NodeCordoned(ts=time.time(), node="n3")])
        found = incident()
        write(as_role(admin, "detector"), "incidents", "llm", [found])
        until(lambda: "llm" in coordinator.state.jobs and found.id in coordinator.state.incidents
              and coordinator.state.nodes["n3"].mode is NodeMode.CORDONED, running.alive)
    finally:
        running.stop()
        coordinator.close()


def test_an_executor_keeps_taking_commands(admin: KafkaSettings, tmp_path: Path) -> None:
    config = ExecutorConfig(node="n1", state_dir=tmp_path / "n1", trusted=TRUSTED, node_key=node_key("n1"),
                            stop_grace_s=5.0, admission=POLICY)
    executor = RunningExecutor(config, as_role(admin, "executor"))

    def alive() -> None:
        assert executor.error is None, f"the executor stopped: {executor.error!r}"

    try:
        command = KEY.sign(s.Command(ts=time.time(), node="n1", id="after-poison", job="j", generation=0,
                                     action=s.CommandAction.STOP, deployment=admin.topic_prefix))
        poisoned = write(as_role(admin, "coordinator"), "commands", "n1", [*poisons(), command])
        check_letters(admin, poisoned, alive)

        def answered() -> bool:
            with TopicReader(admin, [admin.topics.acks], end=NOW, validate=True) as reader:
                acks = [r.event for batch in reader.batches() for r in batch]
            return any(isinstance(a, s.CommandAcked) and a.command_id == "after-poison" and a.status == "done"
                       for a in acks)

        until(answered, alive)
    finally:
        executor.stop()  # raises what stopped it, if anything did


def test_the_alert_bridge_keeps_alerting(admin: KafkaSettings) -> None:
    posted: list = []

    def post(url: str, body, timeout_s: float) -> Result:
        posted.append(body)
        return Result(Outcome.DELIVERED, "200")

    ops = as_role(admin, "ops")
    config = AlertBridgeConfig.model_validate({"webhook": {"url": "http://127.0.0.1:9/hook"},
                                               "group_id": f"{admin.topic_prefix}alerts-poison"})
    bridge = AlertBridge(ops, config, post=post)
    bridge.start()
    running = Running(stepping(lambda: bridge.step(0.2)))
    try:
        found = incident()
        poisoned = write(as_role(admin, "coordinator"), "recovery", "llm", poisons())
        poisoned |= write(as_role(admin, "detector"), "incidents", "llm", [*poisons(), found])
        check_letters(admin, poisoned, running.alive)
        until(lambda: any(found.id in str(body) for body in posted), running.alive)
    finally:
        running.stop()
        bridge.close()


def test_the_largest_letter_is_taken_by_the_producer_and_the_broker(admin: KafkaSettings) -> None:
    """The worst case of every field (schemas/dlq.py) through a real producer and broker."""
    letter = s.DeadLettered.of(ts=1.0, reason="\x01" * 1_000_000, topic="\x01" * 10_000, partition=0,
                               offset=1, key=b"\x01" * 1_000_000, value=b"\x01" * 900_000)
    with EventProducer(as_role(admin, "detector")) as out:
        out.send(admin.topics.dlq, letter, key="t")
    [record] = letters(admin).values()
    assert record.event == letter and len(record.value) > MAX_LETTER_BYTES // 2


def test_a_dlq_that_takes_less_gets_the_letter_without_its_value(admin: KafkaSettings) -> None:
    """A dlq topic set below the cap (max.message.bytes): the broker refuses the letter, which is sent
    again without the value's kept bytes; the size and hash still tell which record it was."""
    client = AdminClient(admin.client_config())
    limit = [ConfigEntry("max.message.bytes", "8000", incremental_operation=AlterConfigOpType.SET)]
    for future in client.incremental_alter_configs(
            [ConfigResource(ResourceType.TOPIC, admin.topics.dlq, incremental_configs=limit)]).values():
        future.result()
    value = os.urandom(40_000)  # base64 of random bytes: lz4 cannot bring it under the limit
    letter = s.DeadLettered.of(ts=1.0, reason="bad", topic=admin.topics.gpu, partition=0, offset=1, key=b"n1",
                               value=value)
    with EventProducer(as_role(admin, "detector")) as out:
        out.send(admin.topics.dlq, letter, key="t")
    [record] = letters(admin).values()
    assert record.event.raw_value() == b"" and record.event.truncated and record.event.reason == "bad"
    assert record.event.value_sha256 == hashlib.sha256(value).hexdigest()
    assert record.event.value_size == 40_000


@pytest.fixture(autouse=True)
def _no_dead_letters_lost() -> Iterator[None]:
    from prometheus_client import REGISTRY

    def lost() -> float:
        return REGISTRY.get_sample_value("trainmedic_dead_letter_failures_total", {"outcome": "lost"}) or 0.0

    before = lost()
    yield
    assert lost() == before
