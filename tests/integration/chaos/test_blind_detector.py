"""Blind is not dead (ARCHITECTURE.md, "Safety"): real processes on a broker of the test's own.

Three healthy `trainmedic node --source synthetic` processes, the detector and the coordinator
(the demo's `LocalCluster`), then, one after the other on the same cluster:
(a) the broker stopped for 20 s and started again, (b) the broker frozen (SIGSTOP) for 20 s,
(c) the detector killed with SIGKILL and restarted: each must give no node_lost, no SEV1 or
SEV2 and no recovery action (a WARN telemetry_gap is what a gap is); then (d) one node's process
killed: exactly that node node_lost, within the usual delay. The phases share the cluster to keep
the whole within a few minutes on two cores; each judges only what happened during it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bus.admin import create_topics
from bus.reader import NOW, TopicReader
from bus.settings import KafkaSettings, home
from schemas import Incident
from trainmedic.broker import LocalBroker
from trainmedic.demo.cluster import DemoLayout, LocalCluster, free_port

NODES = ("cn0", "cn1", "cn2")
OUTAGE_S = 20.0
SETTLE_S = 15.0  # after a fault ends: time for the services to reconnect and the detector to decide


def _ports() -> int:
    """A free port whose next one (the controller's) is free too."""
    for _ in range(50):
        port = free_port()
        if port < 65535 and _free(port + 1):
            return port
    raise RuntimeError("no two free ports in a row")


def _free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Chaos:
    def __init__(self, root: Path) -> None:
        kafka_home = root / "home"
        kafka_home.mkdir()
        shared = home() / "kafka"
        if (shared / "libs").is_dir():  # the jars, fetched once for the project's own broker
            (kafka_home / "kafka").symlink_to(shared)
        self.broker = LocalBroker(kafka_home, port=_ports())
        state, _ = self.broker.start()
        self.settings = KafkaSettings(bootstrap=state.bootstrap, topic_prefix=f"c{uuid.uuid4().hex[:8]}.")
        create_topics(self.settings, partitions=2)
        self.cluster = LocalCluster(DemoLayout(root / "demo"), state.bootstrap, self.settings.topic_prefix,
                                    NODES)
        self.cluster.prepare({})

    def start(self) -> None:
        self.cluster.start_services()
        self.cluster.wait_ready(timeout_s=150)

    def events(self) -> list:
        """Everything on the incidents topic: incidents and the coordinator's recovery events."""
        with TopicReader(self.settings, [self.settings.topics.incidents], end=NOW, validate=True) as log:
            return [r.event for batch in log.batches() for r in batch]

    def since(self, t: float) -> tuple[list[Incident], list]:
        events = [e for e in self.events() if e.ts >= t]
        return ([e for e in events if isinstance(e, Incident)],
                [e for e in events if not isinstance(e, Incident)])

    def restart_detector(self) -> None:
        self.cluster._start("detector", [sys.executable, "-m", "streams", "--start", "earliest", "--config",
                                         str(self.cluster.layout.root / "detector.json")])

    def close(self) -> None:
        try:
            self.cluster.close()
        finally:
            state = self.broker.state()
            if state is not None:
                os.kill(state.pid, signal.SIGCONT)  # a frozen broker cannot stop
            self.broker.stop()


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chaos]:
    made = Chaos(tmp_path_factory.mktemp("chaos"))
    try:
        made.start()
        time.sleep(5)  # a few heartbeats of every node before the first fault
        yield made
    finally:
        made.close()


def assert_no_harm(chaos: Chaos, began: float, what: str, spells: int | None = None) -> None:
    """No node fault and no recovery since `began`; the detector reads again (it said so after
    its `spells`-th blind spell)."""
    incidents, recovery = chaos.since(began)
    harm = [(i.category, i.severity, i.node, i.status) for i in incidents
            if i.category == "node_lost" or i.severity in ("SEV1", "SEV2")]
    if harm:  # what the detector read, for the post-mortem
        subprocess.run([sys.executable, "-m", "trainmedic.cli", "record", "--from-offset", "earliest",
                        "-o", str(chaos.cluster.layout.logs / "telemetry.jsonl")], env=chaos.cluster.env(),
                       timeout=60, check=False)
    assert harm == [], f"{what}: {harm} (detector log: {chaos.cluster.layout.logs / 'detector.log'})"
    assert recovery == [], f"{what}: the coordinator acted: {recovery}"
    for name in ("detector", "coordinator", *NODES):
        chaos.cluster.check_alive(name)
    if spells is not None:
        said = chaos.cluster.log_text("detector").count("reads complete again")
        assert said >= spells, f"{what}: the detector does not read again"


def test_a_broker_stopped_and_started_again_is_no_node_fault(chaos: Chaos) -> None:
    began = time.time()
    chaos.broker.stop()
    time.sleep(OUTAGE_S)
    chaos.broker.start()
    time.sleep(SETTLE_S)
    assert_no_harm(chaos, began - 1, "broker stopped", spells=1)


def test_a_frozen_broker_is_no_node_fault(chaos: Chaos) -> None:
    began = time.time()
    pid = chaos.broker.state().pid
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(OUTAGE_S)
    finally:
        os.kill(pid, signal.SIGCONT)
    time.sleep(SETTLE_S)
    assert_no_harm(chaos, began - 1, "broker frozen", spells=2)


def test_a_detector_killed_and_restarted_is_no_node_fault(chaos: Chaos) -> None:
    began = time.time()
    detector = chaos.cluster.procs["detector"]
    detector.send_signal(signal.SIGKILL)
    detector.wait()
    time.sleep(5)
    chaos.restart_detector()
    time.sleep(SETTLE_S)
    assert_no_harm(chaos, began - 1, "detector restarted")


def test_one_node_killed_is_that_node_lost_in_time(chaos: Chaos) -> None:
    began = time.time()
    node = chaos.cluster.procs[NODES[0]]
    node.send_signal(signal.SIGKILL)
    node.wait()
    deadline = time.monotonic() + 30
    lost: list[Incident] = []
    while not lost and time.monotonic() < deadline:
        time.sleep(1)
        incidents, _ = chaos.since(began - 1)
        lost = [i for i in incidents if i.category == "node_lost" and i.status == "open"]
    time.sleep(3)  # anything else it would (wrongly) decide
    incidents, _ = chaos.since(began - 1)
    opened = [(i.category, i.node) for i in incidents if i.status == "open"]
    assert opened == [("node_lost", NODES[0])]
    assert lost[0].ts - lost[0].first_ts <= 6.0
