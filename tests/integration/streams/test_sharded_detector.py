"""A sharded detector (N ingest instances in one consumer group, one decider) on a real broker gives
exactly `trainmedic replay`'s incidents, ids and order included, with an ingest instance killed in the
middle; and its decider, blind while the ingest stage is down, declares no healthy node lost."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import trainmedic.schemas as s
from tests.integration.streams.test_detector_live import incidents_until, key, stop
from tests.unit.streams.test_scenarios import load
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.streams.replay import replay

pytestmark = pytest.mark.kafka

# Four faults on four clusters of their own, at the same time: node and job state of several
# kinds, spread over every partition. One of them is a node shared by two jobs.
GIVEN = re.compile(r"assigned [1-9]")  # an ingest instance's log line when it is given partitions
SPEED = 4.0  # the recordings are published at 4x their own pace
OVERLAID = ("node_lost_shared_node", "gpu_lost_xid79", "hang_rank", "link_flap")


def overlaid() -> list[s.Event]:
    """The recordings played at once, each cluster's nodes and jobs renamed apart, in ts order."""
    events = []
    for n, name in enumerate(OVERLAID):
        for event in load(name)[0]:
            update = {"node": f"c{n}-{event.node}"}
            if isinstance(event, s.WorkerEvent):
                update["job"] = f"c{n}-{event.job}"
            events.append(event.model_copy(update=update))
    return sorted(events, key=lambda e: e.ts)


@pytest.fixture
def sharded(kafka: KafkaSettings, tmp_path: Path) -> Iterator[callable]:
    """`sharded(stage, *flags)` starts one `python -m trainmedic.streams --stage STAGE` process on this test's
    topics; all are stopped after the test."""
    procs: list[subprocess.Popen] = []

    def start(stage: str, *extra: str) -> subprocess.Popen:
        env = {**os.environ, "TRAINMEDIC_KAFKA_BOOTSTRAP": kafka.bootstrap,
               "TRAINMEDIC_TOPIC_PREFIX": kafka.topic_prefix, "TRAINMEDIC_HOME": str(tmp_path),
               "TRAINMEDIC_DETECTOR_MAX_SKEW_S": "1e10"}  # the recordings are from 2023
        log = open(tmp_path / f"{stage}-{len(procs)}.log", "w")  # noqa: SIM115 - closed with the process
        command = [sys.executable, "-m", "trainmedic.streams", "--stage", stage, "--start", "earliest",
                   *extra]
        procs.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT))
        return procs[-1]

    yield start
    stop(procs)


def per_incident(keys: list[tuple]) -> dict[str, list[tuple]]:
    """Each incident's updates in the order they came: the incidents topic orders one key's only
    (incidents are keyed by job, or node), so that is the order to compare."""
    updates: dict[str, list[tuple]] = {}
    for k in keys:
        updates.setdefault(k[0], []).append(k)
    return updates


def wait_for_assignments(tmp_path: Path, instances: int, give_up_s: float = 60) -> None:
    """Until every ingest instance has been given partitions (a group forms in steps)."""
    deadline = time.monotonic() + give_up_s
    while time.monotonic() < deadline:
        texts = [(tmp_path / f"ingest-{n}.log") for n in range(instances)]
        if all(p.exists() and GIVEN.search(p.read_text()) for p in texts):
            return
        time.sleep(0.2)
    raise AssertionError(f"not every ingest instance was given partitions\n{logs(tmp_path)}")


def logs(tmp_path: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-2500:]}" for p in sorted(tmp_path.glob("*.log")))


class Paced(threading.Thread):
    """Publishes the events at `speed` times their own pace, as a cluster would (a test's pauses
    must not look like the cluster falling silent)."""

    def __init__(self, settings: KafkaSettings, events: list[s.Event], speed: float) -> None:
        super().__init__(daemon=True)
        self.settings, self.events, self.speed = settings, events, speed
        self.sent = 0
        self._producer = EventProducer(settings)

    def run(self) -> None:
        began, first = time.monotonic(), self.events[0].ts
        for event in self.events:
            time.sleep(max(0.0, began + (event.ts - first) / self.speed - time.monotonic()))
            self._send(event)
        self._producer.flush(30)

    def _send(self, event: s.Event) -> None:
        topics = self.settings.topics
        topic = (topics.worker if isinstance(event, s.WorkerEvent) else
                 topics.gpu if isinstance(event, s.GpuSample) else topics.node)
        self._producer.send(topic, event, key=getattr(event, "job", None) or event.node)
        self.sent += 1


@pytest.mark.parametrize("instances", [2, 3])
def test_n_ingest_instances_give_replay_s_incidents_with_one_killed_in_the_middle(
    kafka: KafkaSettings, group_id: str, sharded, tmp_path: Path, instances: int,
) -> None:
    events = overlaid()
    last_ts = events[-1].ts
    expected = [key(i) for i in replay(events, tail_s=600) if i.ts <= last_ts]
    assert {k[2] for k in expected if k[1] == "open"} >= {"node_lost", "gpu_lost", "hang", "link_flap"}
    ingest = [sharded("ingest", "--instance", f"i{n}") for n in range(instances)]
    sharded("decide")
    wait_for_assignments(tmp_path, instances)
    nodes = Paced(kafka, events, SPEED)
    nodes.start()
    _wait_until(lambda: nodes.sent > len(events) // 3, "a third published", tmp_path)
    survivors = [tmp_path / f"ingest-{n}.log" for n in range(1, instances)]
    before = [len(log.read_text()) for log in survivors]
    ingest[0].kill()  # mid-recording: its partitions go to the others, from the group's offsets
    nodes.join(120)
    seen = incidents_until(kafka, group_id, set(expected), give_up_s=120)
    got = [key(i) for i in seen if i.ts <= last_ts]
    assert per_incident(got) == per_incident(expected), logs(tmp_path)
    taken_over = [GIVEN.search(log.read_text()[at:]) for log, at in zip(survivors, before, strict=True)]
    assert any(taken_over), f"no survivor took the killed instance's partitions\n{logs(tmp_path)}"


def test_the_decider_is_blind_not_dead_while_the_ingest_stage_is_down(
    kafka: KafkaSettings, group_id: str, sharded, tmp_path: Path,
) -> None:
    """The only ingest instance stopped for 20 s while the nodes go on publishing: the decider reads
    nothing, and does not take that for silence (event time waits; no node is lost); once the instance
    is back, it catches up and decides what replay does. (Stopped cleanly: killed, it would leave a
    transaction open that holds the decider's reads back by itself until the broker aborts it.)"""
    events = sorted(load("node_lost_gloo")[0], key=lambda e: e.ts)
    last_ts = events[-1].ts
    expected = [key(i) for i in replay(events, tail_s=600) if i.ts <= last_ts]
    first = sharded("ingest", "--instance", "a")
    sharded("decide")
    wait_for_assignments(tmp_path, 1)
    nodes = Paced(kafka, events, SPEED)
    nodes.start()
    _wait_until(lambda: nodes.sent > len(events) // 5, "a fifth published", tmp_path)
    first.send_signal(signal.SIGTERM)
    first.wait(30)
    time.sleep(20)  # the nodes go on while nothing reads for the decider
    sharded("ingest", "--instance", "a")
    nodes.join(120)
    seen = incidents_until(kafka, group_id, set(expected), give_up_s=120)
    got = [key(i) for i in seen if i.ts <= last_ts]
    assert per_incident(got) == per_incident(expected), logs(tmp_path)
    assert "reads complete again after" in (tmp_path / "decide-1.log").read_text(), logs(tmp_path)


def _wait_until(done, what: str, tmp_path: Path, give_up_s: float = 60) -> None:
    deadline = time.monotonic() + give_up_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} in {give_up_s} s\n{logs(tmp_path)}")
        time.sleep(0.05)
