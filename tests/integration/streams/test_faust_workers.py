"""Two Faust detector workers with one app id, on a real broker: neither decides on half a cluster."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import trainmedic.schemas as s
from tests.integration.streams.test_detector_live import _wait_for_log, detector, stop  # noqa: F401
from trainmedic.bus.consumer import EventConsumer
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings

pytestmark = pytest.mark.kafka

NODES = [f"node-{n:02d}" for n in range(12)]  # over every partition of the test's telemetry.node


@pytest.fixture
def engine() -> str:
    return "faust"


def test_a_second_faust_worker_makes_neither_decide_on_half_the_cluster(
    kafka: KafkaSettings, group_id: str, detector, tmp_path: Path,  # noqa: F811
) -> None:
    """A second worker with the same app id (a second replica, a rolling update) splits the
    telemetry partitions between them. A worker that decided on the nodes it still reads would take
    the others for silent: with the partitions taken from it dropped from its read check, the first
    opens a false telemetry_gap here. Each must stand by, and say why, until it reads every
    partition again; then the first carries on, and finds a node that does go silent."""
    silent: set[str] = set()
    done = threading.Event()

    def beat() -> None:  # a healthy cluster: every node's heartbeat every 0.5 s
        with EventProducer(kafka) as producer:
            while not done.is_set():
                now = time.time()
                for node in NODES:
                    if node not in silent:
                        producer.send(kafka.topics.node, s.NodeHeartbeat(ts=now, node=node, interval=0.5),
                                      key=node)
                done.wait(0.5)

    beating = threading.Thread(target=beat, daemon=True)
    beating.start()
    try:
        detector()
        _wait_for_log(tmp_path / "detector-0.log", "Worker ready")
        time.sleep(3)
        second = detector()
        _wait_for_log(tmp_path / "detector-1.log", "Worker ready")
        time.sleep(10)  # over three times the node-lost timeout (3 s), with the partitions split
        stop([second])
        time.sleep(6)  # the first worker reads every partition again
        silent.add("node-03")
        opened: list[s.Incident] = []
        deadline = time.monotonic() + 60
        with EventConsumer(kafka, [kafka.topics.incidents], group_id) as consumer:
            while time.monotonic() < deadline and not any(i.node == "node-03" for i in opened):
                opened += [r.event for r in consumer.poll(0.5) if r.event.status == "open"]
    finally:
        done.set()
        beating.join(10)
    logs = [p.read_text() for p in sorted(tmp_path.glob("detector-*.log"))]
    assert [(i.category, i.node) for i in opened] == [("node_lost", "node-03")], "\n".join(logs)
    # each worker told the operator why it stood by, and the first that it decides again
    assert all("telemetry partitions: another worker runs with app id" in log for log in logs)
    assert "reads every telemetry partition again" in logs[0]
