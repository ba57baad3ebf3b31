"""Time is the broker's (issue 32): on the real secure broker, telemetry is stamped by the broker,
`topics create` brings an older deployment's telemetry topics to it, and the real detector (each
engine) refuses telemetry an `agent` forged an hour ahead for healthy nodes: no incident, every
forged record on the dlq as clock_skew, and a real fault afterwards still detected."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, TopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType

import trainmedic.schemas as s
from tests.integration.streams.test_detector_live import stop
from trainmedic.bus import clients
from trainmedic.bus.admin import create_topics, ensure_topic, remove_prefix
from trainmedic.bus.reader import NOW, TopicReader
from trainmedic.bus.settings import KafkaSettings
from trainmedic.bus.telemetry_keys import Signer

pytestmark = pytest.mark.kafka

HOUR = 3600.0
NODES = ("cn0", "cn1", "cn2")
TELEMETRY = ("telemetry.gpu", "telemetry.node", "telemetry.worker")
ROUNDS = 10  # the forger's: one heartbeat and one GPU sample per node each


def as_role(kafka: KafkaSettings, role: str) -> KafkaSettings:
    return KafkaSettings.from_env(role=role, bootstrap=kafka.bootstrap, topic_prefix=kafka.topic_prefix)


def timestamp_types(settings: KafkaSettings, names: list[str]) -> dict[str, str]:
    admin = clients.admin(settings)
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, name) for name in names])
    return {res.name: future.result()["message.timestamp.type"].value for res, future in futures.items()}


def test_telemetry_is_stamped_by_the_broker_whatever_the_producer_says(kafka: KafkaSettings) -> None:
    topics = [kafka.topics.name(suffix) for suffix in TELEMETRY]
    assert set(timestamp_types(kafka, topics).values()) == {"LogAppendTime"}
    producer = clients.producer(as_role(kafka, "agent"), {})
    forged = s.NodeHeartbeat(ts=time.time() + HOUR, node="cn0", interval=1.0)
    producer.produce(kafka.topics.node, s.encode(forged), b"cn0", partition=0,
                     timestamp=int(forged.ts * 1000))
    assert producer.flush(15) == 0
    consumer = clients.consumer(kafka, {"group.id": f"{kafka.topic_prefix}read", "enable.auto.commit": False})
    consumer.assign([TopicPartition(kafka.topics.node, 0, 0)])
    msg = None
    for _ in range(40):
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            break
    consumer.close()
    kind, stamp = msg.timestamp()
    assert kind == TIMESTAMP_LOG_APPEND_TIME and abs(stamp / 1000 - time.time()) < 30


def test_topics_create_brings_older_telemetry_topics_to_the_brokers_clock(kafka_bootstrap: str) -> None:
    older = KafkaSettings.from_env(role="admin", bootstrap=kafka_bootstrap,
                                   topic_prefix=f"t{os.urandom(5).hex()}.")
    try:
        for suffix in TELEMETRY:  # as `topics create` made them before: stamped by their producers
            ensure_topic(older, older.topics.name(suffix), partitions=1, config={
                "message.timestamp.type": "CreateTime"})
        result = create_topics(older, partitions=1)
        telemetry = [older.topics.name(suffix) for suffix in TELEMETRY]
        assert {result[name] for name in telemetry} == {"updated"}
        assert result[older.topics.acks] == "created"
        assert set(timestamp_types(older, telemetry).values()) == {"LogAppendTime"}
        again = create_topics(older, partitions=1)
        assert set(again.values()) == {"exists"}
    finally:
        remove_prefix(older, older.topics.prefix)


class Cluster(threading.Thread):
    """Healthy nodes: a heartbeat and a GPU sample each, every 0.5 s, as the `agent` role."""

    def __init__(self, settings: KafkaSettings) -> None:
        super().__init__(daemon=True)
        self.settings, self.nodes, self.done = settings, set(NODES), threading.Event()
        self.failures: list = []

    def run(self) -> None:
        producer, topics = clients.producer(self.settings, {}), self.settings.topics
        tagged = tags(self.settings)
        while not self.done.is_set():
            now = time.time()
            for node in sorted(self.nodes):
                for topic, event in ((topics.node, s.NodeHeartbeat(ts=now, node=node, interval=0.5)),
                                     (topics.gpu, s.GpuSample(ts=now, node=node, gpu=0, util=90.0))):
                    value = s.encode(event)
                    producer.produce(topic, value, node.encode(), on_delivery=self._delivered,
                                     headers=tagged(value, node))
            producer.poll(0)
            self.done.wait(0.5)
        producer.flush(15)

    def _delivered(self, err, _msg) -> None:
        if err is not None:
            self.failures.append(err)


def tags(settings: KafkaSettings):
    """(value, node) -> the record's `tm-mac` header, as the node's producer writes it: each node's
    telemetry is its own here (one machine: the agent role signs with the master, as any node)."""
    signer = Signer(settings.telemetry_key, settings.topic_prefix)
    return signer.headers


def forge(settings: KafkaSettings) -> int:
    """Each node's telemetry an hour ahead, message timestamps forged alike; how many records."""
    producer, topics, sent, tagged = clients.producer(settings, {}), settings.topics, 0, tags(settings)
    for _ in range(ROUNDS):
        ahead = time.time() + HOUR
        for node in NODES:
            for topic, event in ((topics.node, s.NodeHeartbeat(ts=ahead, node=node, interval=0.5)),
                                 (topics.gpu, s.GpuSample(ts=ahead, node=node, gpu=0, util=90.0))):
                value = s.encode(event)
                producer.produce(topic, value, node.encode(), timestamp=int(ahead * 1000),
                                 headers=tagged(value, node))
                sent += 1
        producer.poll(0)
        time.sleep(0.3)
    assert producer.flush(15) == 0
    return sent


# Each engine's processes, and what each logs once it reads.
ENGINES = {"consumer": [(["--start", "earliest"], r"detector ready")],
           "faust": [(["--engine", "faust"], r"Worker ready")],
           "sharded": [(["--stage", "ingest", "--instance", "i0", "--start", "earliest"], r"assigned [1-9]"),
                       (["--stage", "decide"], r"detector ready")]}


@pytest.fixture
def detector(kafka: KafkaSettings, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """The engine's `python -m trainmedic.streams` processes on this test's topics (as the `detector` role),
    ready; their log folder."""
    engine = request.param
    env = {**os.environ, "TRAINMEDIC_KAFKA_BOOTSTRAP": kafka.bootstrap,
           "TRAINMEDIC_TOPIC_PREFIX": kafka.topic_prefix, "TRAINMEDIC_HOME": str(tmp_path)}
    procs = []
    for n, (flags, _) in enumerate(ENGINES[engine]):
        log = open(tmp_path / f"detector-{n}.log", "w")  # noqa: SIM115 - closed with the process
        procs.append(subprocess.Popen([sys.executable, "-m", "trainmedic.streams", *flags], env=env,
                                      stdout=log,
                                      stderr=subprocess.STDOUT))
    try:
        deadline = time.monotonic() + 90
        for n, (_, ready) in enumerate(ENGINES[engine]):
            while not re.search(ready, (tmp_path / f"detector-{n}.log").read_text()):
                assert all(p.poll() is None for p in procs) and time.monotonic() < deadline, logs(tmp_path)
                time.sleep(0.2)
        yield tmp_path
    finally:
        stop(procs)


def logs(folder: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(folder.glob("detector-*.log")))


def read(settings: KafkaSettings, topic: str) -> list:
    with TopicReader(settings, [topic], end=NOW, validate=True) as reader:
        return [record.event for batch in reader.batches() for record in batch]


def until(settings: KafkaSettings, topic: str, done, give_up_s: float) -> list:
    deadline = time.monotonic() + give_up_s
    while True:
        got = read(settings, topic)
        if done(got) or time.monotonic() > deadline:
            return got
        time.sleep(1.0)


@pytest.mark.parametrize("detector", sorted(ENGINES), indirect=True)
def test_telemetry_forged_an_hour_ahead_moves_no_clock_and_a_real_fault_is_still_seen(
    kafka: KafkaSettings, detector: Path,
) -> None:
    agent = as_role(kafka, "agent")
    cluster = Cluster(agent)
    cluster.start()
    try:
        time.sleep(4)  # healthy, seen by the detector
        forged = forge(agent)
        time.sleep(8)  # before the fix: event time an hour on, every node silent within seconds
        incidents = read(kafka, kafka.topics.incidents)
        assert incidents == [], logs(detector)
        dead = until(kafka, kafka.topics.dlq, lambda got: len(got) >= forged, 30)
        assert len(dead) == forged, logs(detector)
        assert all(d.reason.startswith("clock_skew: ") and " ahead of " in d.reason for d in dead)
        assert {d.source_topic for d in dead} == {kafka.topics.gpu, kafka.topics.node}

        cluster.nodes.discard("cn2")  # a real fault: cn2 goes silent
        lost = time.time()
        found = until(kafka, kafka.topics.incidents, lambda got: any(i.category == "node_lost"
                                                                     for i in got), 60)
        faults = [(i.category, i.node, i.status) for i in found]
        assert faults == [("node_lost", "cn2", "open")], logs(detector)
        assert found[0].ts - lost < 15  # event time kept with the wall clock
    finally:
        cluster.done.set()
        cluster.join(30)
    assert cluster.failures == []
