"""Three members of a broker cluster, each `trainmedic broker start --node-id N --tls` in a
TRAINMEDIC_HOME of its own with the shared folder copied from the first (as on three hosts; here on
loopback, ports in 19700-19799): the trainmedic topics get three replicas and two in sync, a role
produces with acks=all and another consumes while the leader's member is stopped and started again,
and not one record is lost."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import ConfigResource, ResourceType

from tests.helpers.ports import free_pairs
from tests.helpers.waiting import wait_until
from trainmedic.bus.admin import create_topics, wait_for_topics
from trainmedic.bus.clients import admin as admin_client
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.signals import alive
from trainmedic.local.broker_listen import BrokerState

pytestmark = pytest.mark.kafka

PREFIX = "clu."
TOPIC = f"{PREFIX}telemetry.node"


def described(client, resource: ConfigResource) -> dict | None:
    """`resource`'s configs, or None while the member asked does not know the topic yet."""
    try:
        return client.describe_configs([resource])[resource].result()
    except KafkaException as err:
        if err.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return None
        raise


def member(home: Path, *args: str) -> subprocess.Popen[str]:
    """`trainmedic broker ARGS` with `home` as TRAINMEDIC_HOME: one host's member."""
    env = {**os.environ, "TRAINMEDIC_HOME": str(home), "TRAINMEDIC_TOPIC_PREFIX": PREFIX}
    env.pop("TRAINMEDIC_CREDENTIALS_DIR", None)  # the session broker's: each member writes its own
    env.pop("TRAINMEDIC_KAFKA_BOOTSTRAP", None)
    return subprocess.Popen([sys.executable, "-m", "trainmedic.cli", "broker", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def broker(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = member(home, *args)
    out, err = proc.communicate(timeout=420)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


class _Quiet:
    def log(self, *_: object) -> None:
        pass


class Traffic:
    """A producer writing numbered records with acks=all, one every 10 ms, and a consumer reading them,
    each on its own thread, every delivery and every record read kept with its time."""

    def __init__(self, producer: KafkaSettings, consumer: KafkaSettings) -> None:
        self.producer = Producer(producer.client_config(**{
            "acks": "all", "enable.idempotence": True, "linger.ms": 5, "logger": _Quiet()}))
        self.consumer = Consumer(consumer.client_config(**{
            "group.id": f"{PREFIX}read-cluster-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
            "logger": _Quiet()}))
        self.delivered: list[tuple[int, float]] = []
        self.failed: list[str] = []
        self.read: list[tuple[int, float]] = []
        self.producing, self.reading = threading.Event(), threading.Event()
        self.threads = [threading.Thread(target=self._produce), threading.Thread(target=self._consume)]

    def start(self) -> None:
        self.producing.set()
        self.reading.set()
        self.consumer.subscribe([TOPIC])
        for thread in self.threads:
            thread.start()

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failed.append(err.str())
        else:
            self.delivered.append((int(msg.value() or b""), time.monotonic()))

    def _produce(self) -> None:
        sequence = 0
        while self.producing.is_set():
            self.producer.produce(TOPIC, str(sequence).encode(), key=b"n1", on_delivery=self._delivered)
            sequence += 1
            self.producer.poll(0.01)
        self.unsent = self.producer.flush(120)

    def _consume(self) -> None:
        try:
            while self.reading.is_set():
                record = self.consumer.poll(0.2)
                if record is not None and record.error() is None:
                    self.read.append((int(record.value()), time.monotonic()))
        finally:
            self.consumer.close()

    def read_between(self, begin: float, end: float) -> int:
        return sum(begin <= at < end for _, at in self.read)

    def stop(self, timeout_s: float = 120.0) -> None:
        """Stop producing, then read until every delivered record is read (or the timeout passes)."""
        self.producing.clear()
        self.threads[0].join(timeout_s)
        deadline = time.monotonic() + timeout_s
        while len({n for n, _ in self.read}) < len(self.delivered) and time.monotonic() < deadline:
            time.sleep(0.2)
        self.reading.clear()
        self.threads[1].join(timeout_s)


Partitions = list[tuple[int, list[int], list[int]]]  # (leader, replicas, in-sync replicas) each


def replicas(admin: KafkaSettings) -> dict[str, Partitions]:
    """Each topic's partitions: (leader, replicas, in-sync replicas)."""
    meta = admin_client(admin).list_topics(timeout=30)
    return {name: [(p.leader, p.replicas, p.isrs) for p in topic.partitions.values()]
            for name, topic in meta.topics.items()}


def in_sync(admin: KafkaSettings, names: set[str], timeout_s: float = 60.0) -> dict[str, Partitions]:
    """`replicas` of `names` once each is known with three in sync, or as they are at the timeout (the
    member asked may learn of a new topic or a returning replica a moment after another)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = {name: parts for name, parts in replicas(admin).items() if name in names}
        isrs = [isr for parts in found.values() for *_, isr in parts]
        done = len(found) == len(names) and all(len(isr) == 3 for isr in isrs)
        if done or time.monotonic() >= deadline:
            return found
        time.sleep(0.5)


def test_three_members_replicate_and_lose_nothing_when_one_stops(tmp_path: Path) -> None:
    ports = free_pairs(3, 19700, 19799, apart=10)
    homes = [tmp_path / f"h{n}" for n in (1, 2, 3)]
    members = ",".join(f"{n}@127.0.0.1:{port}" for n, port in zip((1, 2, 3), ports, strict=True))
    for fetched in [member(home, "fetch") for home in homes]:  # the jars, as each host fetches them
        assert fetched.communicate(timeout=300) and fetched.returncode == 0
    made = broker(homes[0], "init", "--members", members)
    assert made.returncode == 0, made.stderr
    shared = homes[0] / "broker" / "cluster"
    for home in homes[1:]:  # what an operator's `scp -rp` does, to the same place under each home
        (home / "broker").mkdir(mode=0o700)
        shutil.copytree(shared, home / "broker" / "cluster")
        assert stat.S_IMODE((home / "broker" / "cluster" / "ca.key").stat().st_mode) == 0o600

    began = time.monotonic()
    starts = [member(home, "start", "--node-id", str(n), "--tls") for n, home in enumerate(homes, 1)]
    try:
        outputs = [start.communicate(timeout=420) for start in starts]
        took = time.monotonic() - began
        print(f"\nthree-member cluster started in {took:.1f}s")
        assert [start.returncode for start in starts] == [0, 0, 0], [err for _, err in outputs]
        bootstrap = ",".join(f"127.0.0.1:{port}" for port in ports)
        assert [out.strip() for out, _ in outputs] == [bootstrap] * 3
        for n, home in enumerate(homes, 1):
            assert f"node {n} of a 3-member cluster" in broker(home, "status").stdout

        folders = [home / "credentials" for home in homes]
        env = {"TRAINMEDIC_CREDENTIALS_DIR": str(folders[2])}
        admin = KafkaSettings.from_env(env, role="admin", topic_prefix=PREFIX)
        agent = KafkaSettings.from_env({"TRAINMEDIC_CREDENTIALS_DIR": str(folders[0])}, role="agent")
        operator = KafkaSettings.from_env({"TRAINMEDIC_CREDENTIALS_DIR": str(folders[1])}, role="operator")
        assert agent.bootstrap == operator.bootstrap == bootstrap  # every member in every role file
        assert agent.extra["security.protocol"] == "SASL_SSL"
        create_topics(admin, partitions=1)
        wait_for_topics(admin, list(admin.topics.all()))
        topics = in_sync(admin, set(admin.topics.all()))
        assert len(topics) == len(admin.topics.all())
        assert all(len(r) == 3 and len(isr) == 3 for parts in topics.values() for _, r, isr in parts), topics
        resource = ConfigResource(ResourceType.TOPIC, TOPIC)
        client = admin_client(admin)  # alive until its future is done: a destroyed client fails it
        # A member learns a new topic from the controller a moment after another answered for it
        # (UNKNOWN_TOPIC_OR_PART from the one asked): ask until one knows it, as a client would.
        configs = wait_until(lambda: described(client, resource), 30, f"{TOPIC}'s configs")
        assert configs["min.insync.replicas"].value == "2"

        traffic = Traffic(agent, operator)
        traffic.start()
        deadline = time.monotonic() + 60
        while len(traffic.read) < 50 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(traffic.read) >= 50, f"read {len(traffic.read)} of {len(traffic.delivered)}"
        leader = replicas(admin)[TOPIC][0][0]
        down = time.monotonic()
        assert broker(homes[leader - 1], "stop").stdout.strip() == "broker stopped"
        stopped_at = time.monotonic()
        time.sleep(5)
        back = time.monotonic()
        restarted = broker(homes[leader - 1], "start", "--node-id", str(leader), "--tls")
        up = time.monotonic()
        assert restarted.returncode == 0, restarted.stderr
        print(f"node {leader} stopped in {stopped_at - down:.1f}s, started again in {up - back:.1f}s")
        time.sleep(2)
        traffic.stop()

        produced = sorted(n for n, _ in traffic.delivered)
        assert traffic.failed == [] and traffic.unsent == 0
        assert produced == list(range(len(produced)))  # every record produced was delivered
        assert sorted(n for n, _ in traffic.read) == produced  # and read once: none lost
        while_down = sum(stopped_at <= at < back for _, at in traffic.delivered)
        assert while_down > 100 and traffic.read_between(stopped_at, back) > 100, (while_down, len(produced))
        print(f"{len(produced)} records produced and read, {while_down} in the 5s node {leader} was down")

        restored = in_sync(admin, {TOPIC, "__consumer_offsets"})  # the member caught up: three in sync
        assert set(restored) == {TOPIC, "__consumer_offsets"}  # the groups' offsets: three copies too
        assert all(len(r) == len(isr) == 3 for parts in restored.values() for _, r, isr in parts), restored
    finally:
        pids = [BrokerState(**_state(home)).pid for home in homes if _state(home)]
        stopped, stop_s = [], []
        for home in homes:  # one after the other: the last one has no quorum left to hand over to
            began = time.monotonic()
            stopped.append(broker(home, "stop"))
            stop_s.append(time.monotonic() - began)
        print("stopped one after the other in " + ", ".join(f"{s:.1f}s" for s in stop_s))
    assert [s.stdout.strip() for s in stopped] == ["broker stopped"] * 3
    assert max(stop_s) < 15, stop_s  # not the 30s a member without a quorum waited before being killed
    assert not any(alive(pid) for pid in pids)
    assert all(broker(home, "status").returncode == 3 for home in homes)


def _state(home: Path) -> dict[str, object]:
    try:
        return json.loads((home / "broker" / "broker.json").read_text())
    except FileNotFoundError:
        return {}
