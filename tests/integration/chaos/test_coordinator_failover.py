"""One active coordinator (issue 13): two real `trainmedic coordinator` processes on the real broker.

A leads and B waits. (1) A is frozen (SIGSTOP) past its group session: B takes the lease and
a newer epoch; A, thawed, is fenced and stands down without writing. (2) Mid-recovery (a SEV1
re-plan whose commands are not yet answered) the leader B is killed with SIGKILL: A takes
over, and the recovery completes. Throughout, each (node, generation, action) is one command
id, every command carries the epoch of the coordinator that sent it, and no plan is made twice.
The test plays the executors: it answers commands with acks, as an executor would.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.waiting import wait_until
from tests.integration.test_coordinator import ack_all, read
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.schemas import Incident
from trainmedic.schemas.recovery import RecoveryCompleted, RecoveryPlanned

pytestmark = pytest.mark.kafka

CONFIG = """\
tick_s: 0.2
group_window_s: 0.5
ack_timeout_s: 60
default_address: 127.0.0.1
nodes:
  - {id: n1}
  - {id: n2}
  - {id: n3}
  - {id: n4}
"""
JOB = """\
id: llm
nodes: [n1, n2, n3]
throughput: {2: 2.0e15, 3: 3.0e15}
command: [python, train.py]
ranks_per_node: 1
master_port: 29631
checkpoint_dir: /ckpt/llm
"""
LEADING = re.compile(r"leading at epoch (\d+)")


class Coordinator:
    def __init__(self, name: str, tmp: Path, env: dict[str, str]) -> None:
        self.log = tmp / f"{name}.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainmedic.cli", "coordinator", "--config", str(tmp / "coordinator.yaml"),
             "--insecure"], env=env, stdout=subprocess.DEVNULL, stderr=self.log.open("w"))

    def text(self) -> str:
        return self.log.read_text()

    def epochs(self) -> list[int]:
        return [int(m) for m in LEADING.findall(self.text())]


def test_one_leader_a_frozen_one_is_fenced_a_killed_one_is_replaced(kafka: KafkaSettings, tmp_path: Path):
    (tmp_path / "coordinator.yaml").write_text(CONFIG)
    (tmp_path / "job.yaml").write_text(JOB)
    env = {**os.environ, "TRAINMEDIC_KAFKA_BOOTSTRAP": kafka.bootstrap,
           "TRAINMEDIC_TOPIC_PREFIX": kafka.topic_prefix}
    for name in ("TRAINMEDIC_CLUSTER_KEY", "TRAINMEDIC_CLUSTER_KEY_FILE"):
        env.pop(name, None)
    a = Coordinator("a", tmp_path, env)
    b = None
    try:
        (epoch_a,) = wait_until(a.epochs, 60, "A to lead")
        b = Coordinator("b", tmp_path, env)
        wait_until(lambda: "standby" in b.text(), 60, "B to wait as a standby")
        subprocess.run([sys.executable, "-m", "trainmedic.cli", "job", "submit", str(tmp_path / "job.yaml"),
                        "--config", str(tmp_path / "coordinator.yaml"), "--no-local-check",
                        "--insecure"],  # as the coordinators: unsigned
                       env=env, check=True, capture_output=True)
        starts = wait_until(lambda: len(read(kafka, "commands")) == 3 and read(kafka, "commands"), 60,
                            "the three start commands")
        assert {c.epoch for c in starts} == {epoch_a}
        assert b.epochs() == []  # the standby wrote nothing, led nothing
        ack_all(kafka, starts)

        # (1) A frozen past its session: B leads at a newer epoch; A thawed is fenced, writes nothing
        os.kill(a.proc.pid, signal.SIGSTOP)
        frozen = time.monotonic()
        (epoch_b,) = wait_until(b.epochs, 60, "B to take over from the frozen A")
        print(f"take-over from a frozen leader: {time.monotonic() - frozen:.1f}s")
        assert epoch_b > epoch_a
        os.kill(a.proc.pid, signal.SIGCONT)
        wait_until(lambda: "standing down" in a.text() or "standby" in a.text().split("leading at")[-1],
                   60, "A to stand down after its thaw")
        time.sleep(3)  # what a thawed A would do if it fought back: take the lease, fence B
        assert a.epochs() == [epoch_a] and b.proc.poll() is None and b.epochs() == [epoch_b]

        # (2) B killed mid-recovery: A takes over, the recovery completes, nothing twice
        with EventProducer(kafka) as producer:
            producer.send(kafka.topics.incidents, Incident(
                ts=time.time(), id="inc-gpu-lost-n2", status="open", category="gpu_lost", severity="SEV1",
                action="reconfigure", job="llm", node="n2", ranks=(1,), first_ts=time.time() - 1,
                evidence=("Xid 79 on gpu 0",)), key="llm")
        moved = wait_until(lambda: [c for c in read(kafka, "commands") if c.generation == 1], 60,
                           "the re-plan's commands")
        assert {c.epoch for c in moved} == {epoch_b}
        b.proc.kill()
        killed = time.monotonic()
        wait_until(lambda: len(a.epochs()) == 2, 60, "A to take over from the killed B")
        print(f"take-over from a killed leader: {time.monotonic() - killed:.1f}s")
        epoch_a2 = a.epochs()[-1]
        assert epoch_a2 > epoch_b
        ack_all(kafka, moved)
        wait_until(lambda: any(isinstance(e, RecoveryCompleted) and e.generation == 1
                               for e in read(kafka, "recovery")), 60, "the recovery to complete")

        commands = read(kafka, "commands")
        by_role: dict[tuple, set[str]] = {}
        for c in commands:
            by_role.setdefault((c.node, c.generation, c.action), set()).add(c.id)
        assert all(len(ids) == 1 for ids in by_role.values()), by_role
        assert {c.epoch for c in commands} <= {epoch_a, epoch_b, epoch_a2}
        lifecycle = read(kafka, "recovery")
        plans = [e for e in lifecycle if isinstance(e, RecoveryPlanned)]
        assert sorted(p.generation for p in plans) == [0, 1]  # the start and the one re-plan
        assert sum(isinstance(e, RecoveryCompleted) and e.generation == 1 for e in lifecycle) == 1
    finally:
        for c in (a, b):
            if c is not None and c.proc.poll() is None:
                c.proc.send_signal(signal.SIGCONT)
                c.proc.kill()
                c.proc.wait(10)
