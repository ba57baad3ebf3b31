"""An executor restart is not a fault (issue 13): real executor processes, the real broker.

(a) The executor is killed with SIGKILL and started again while two gloo ranks of the demo job
train: the ranks keep stepping (same pids, the same generation, steps still rising), no exit
is reported, and a later stop still stops the adopted ranks and reports their exit.
(b) The executor is frozen (SIGSTOP) and killed right after its ledger shows a command, before
the command's answer is out, then started again: it sends the recorded answer unasked, a resend
gets it again, and nothing is applied twice. Done twice: once as soon as the ledger names the
command (then it was not launched: failed, not applied again), once as soon as the command's
ranks are recorded (then it was: done, the same ranks run, once). In the second, the executor
sometimes gets its done ack out before the poll sees the ranks and freezes it; the resend is
answered with the recorded ack all the same, which is what the coordinator needs when an ack
is lost on its way.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from tests.helpers.ports import free_port
from tests.helpers.waiting import wait_until
from tests.integration.executor.conftest import KEY, Events, job_processes, processes_with
from tests.integration.executor.test_training import steps_in
from trainmedic.bus.producer import EventProducer
from trainmedic.recovery import keyring
from trainmedic.recovery.executor import leftovers
from trainmedic.recovery.signing import TrustedKeys
from trainmedic.schemas import Command, CommandAction, RestoreSource, WorkerSpec, encode


def trusted_folder(root: Path) -> Path:
    """An executor's keys folder: the public half of the tests' coordinator key, trusted as the
    coordinator's (`trainmedic keys trust ID.pub --role coordinator`), and the node's own key
    (`trainmedic keys generate --node n1`), which signs its acks."""
    folder = root / "keys"
    pem = KEY.private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    (root / "coordinator.pub").write_bytes(pem)
    keyring.trust_key(folder, root / "coordinator.pub", keyring.COORDINATOR, time.time())
    keyring.ensure_key(folder, time.time(), keyring.node_role("n1"))
    return folder


class Node:
    """One node's executor as a real `trainmedic executor` process, restartable on the same state."""

    def __init__(self, kafka, root: Path, *flags: str) -> None:
        self.kafka, self.state, self.flags, self.logs = kafka, root / "state", flags, root
        self.jobs = root / "jobs"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> subprocess.Popen:
        self.starts += 1
        log = self.logs / f"executor-{self.starts}.log"
        env = {**os.environ, "TRAINMEDIC_KAFKA_BOOTSTRAP": self.kafka.bootstrap, "OMP_NUM_THREADS": "1",
               "TRAINMEDIC_TOPIC_PREFIX": self.kafka.topic_prefix}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainmedic.cli", "executor", "--node", "n1",
             "--state-dir", str(self.state), "--jobs-dir", str(self.jobs), "--stop-grace-s", "5",
             "--keys-dir", str(trusted_folder(self.logs)), "--ranks-as-root", *self.flags],
            env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
        )
        wait_until(lambda: "reading " in log.read_text() or self.proc.poll() is not None, 60, "the executor")
        assert self.proc.poll() is None, log.read_text()
        return self.proc

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def ranks(self) -> list[dict]:
        """What the executor recorded in ranks.json."""
        path = self.state / "ranks.json"
        return json.loads(path.read_text()) if path.exists() else []

    def ledger_names(self, command_id: str) -> bool:
        path = self.state / "ledgers" / f"{self.kafka.topic_prefix.rstrip('.')}.jsonl"
        return path.exists() and f'"command":"{command_id}"' in path.read_text()


@pytest.fixture
def node_root(kafka, tmp_path) -> Iterator[Path]:
    yield tmp_path
    ranks = job_processes(tmp_path / "state")  # and the launchers
    for pid in processes_with(f"TRAINMEDIC_TOPIC_PREFIX={kafka.topic_prefix}") + ranks:  # executors
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue


@pytest.fixture
def events(kafka) -> Iterator[Events]:
    reader = Events(kafka, [kafka.topics.acks, kafka.topics.worker])
    yield reader
    reader.close()


@pytest.fixture
def send(kafka):
    producer = EventProducer(kafka)

    def publish(command: Command) -> Command:
        command = KEY.sign(command.model_copy(update={"signature": None, "key_id": None,
                                                      "deployment": kafka.topic_prefix}))
        producer.send(kafka.topics.commands, command, key=command.node)
        producer.flush()
        return command

    yield publish
    producer.close()


def same_processes(recorded: list[dict]) -> bool:
    return all(leftovers.start_time(r["pid"]) == r["start"] for r in recorded)


@pytest.mark.kafka
def test_a_killed_executor_restarts_without_stopping_training(kafka, node_root, events, send):
    job = f"adopt-{os.getpid()}-{time.monotonic_ns()}"
    node = Node(kafka, node_root)
    node.start()
    argv = (sys.executable, "-m", "trainmedic.demo.train", "--steps", "100000", "--step-s", "0.05",
            "--timeout-s", "20")
    worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                        ranks=(0, 1), world_size=2, master_addr="127.0.0.1", master_port=free_port(),
                        command=argv, restore=RestoreSource())
    send(Command(ts=time.time(), node="n1", id="start-0", job=job, generation=0, action=CommandAction.START,
                 worker=worker))
    events.wait_for(lambda e: e.type == "ack" and e.command_id == "start-0" and e.status == "done")
    logs = node.jobs / job / "s1" / "logs"
    wait_until(lambda: all(len(steps_in(logs / f"g0-rank{r}.log")) >= 5 for r in (0, 1)), 90, "5 steps")
    recorded = node.ranks()
    assert sorted(r["rank"] for r in recorded) == [0, 1]

    node.kill()  # the executor dies; its ranks, in sessions of their own, go on
    restarted_at = time.time()
    node.start()
    ready_s = time.time() - restarted_at
    assert same_processes(recorded) and sorted(map(str, node.ranks())) == sorted(map(str, recorded))
    before = {r: steps_in(logs / f"g0-rank{r}.log")[-1][0] for r in (0, 1)}
    wait_until(lambda: all(steps_in(logs / f"g0-rank{r}.log")[-1][0] >= before[r] + 20 for r in (0, 1)),
               60, "20 more steps in the same generation")
    assert sorted(p.name for p in logs.iterdir()) == ["g0-rank0.log", "g0-rank1.log"]  # no relaunch
    for r in (0, 1):  # one run of steps, none skipped nor restored
        steps = [step for step, _ in steps_in(logs / f"g0-rank{r}.log")]
        assert steps == list(range(len(steps)))
    assert same_processes(recorded)
    steps_s = steps_in(logs / "g0-rank0.log")[-1][1] - restarted_at

    send(Command(ts=time.time(), node="n1", id="stop-0", job=job, generation=0, action=CommandAction.STOP))
    done = events.wait_for(lambda e: e.type == "ack" and e.command_id == "stop-0" and e.status == "done")
    print(f"\nexecutor restart: reading again after {ready_s:.1f}s; steps went on from {before} for "
          f"{steps_s:.1f}s without a rank restart; the stop of the adopted ranks took {done.elapsed_s:.2f}s")
    exits = [events.wait_for(lambda e, r=r: e.type == "worker_exit" and e.job == job and e.rank == r)
             for r in (0, 1)]
    assert {(e.pid, e.generation, e.exit_code, e.signal) for e in exits} == {
        (r["pid"], 0, None, None) for r in recorded}
    assert all("exit status unknown" in e.reason for e in exits)
    assert processes_with(f"TRAINMEDIC_JOB={job}") == []
    # no exit was reported before the stop: none of signal 9, none at the restart
    reported = [e for e in events.seen if e.type == "worker_exit" and e.job == job]
    assert sorted(reported, key=lambda e: e.rank) == exits
    node.proc.send_signal(signal.SIGTERM)
    assert node.proc.wait(30) == 0


def drain(events: Events, seconds: float) -> None:
    """Read what arrives for `seconds` more."""
    with contextlib.suppress(TimeoutError):
        events.wait_for(lambda e: False, seconds)


def freeze_when(node: Node, ready, timeout_s: float = 30.0) -> None:
    """SIGSTOP the executor the moment `ready()` holds (polled every millisecond), then SIGKILL it."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, "the executor never got there"
        time.sleep(0.001)
    os.kill(node.proc.pid, signal.SIGSTOP)
    node.kill()


@pytest.mark.kafka
@pytest.mark.parametrize("moment", ["ledger", "ranks"])
def test_a_command_whose_ack_died_with_the_executor_is_answered_after_its_restart(
        kafka, node_root, events, send, moment):
    job = f"reack-{moment}-{os.getpid()}-{time.monotonic_ns()}"
    starts = node_root / "starts"
    node = Node(kafka, node_root, "--no-warm-start", "--allowed-executables", "sh")  # its ranks are shells
    node.start()
    script = f"echo $RANK $$ >> {starts}; sleep 120 & wait"
    worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                        ranks=(0, 1), world_size=2, master_addr="127.0.0.1", master_port=1,
                        command=("sh", "-c", script))
    command = send(Command(ts=time.time(), node="n1", id=f"start-{moment}", job=job, generation=0,
                           action=CommandAction.START, worker=worker))
    if moment == "ledger":
        freeze_when(node, lambda: node.ledger_names(command.id))
    else:
        freeze_when(node, lambda: len(node.ranks()) == 2)
    drain(events, 1.0)
    acked_before = [e.status for e in events.seen if e.type == "ack" and e.command_id == command.id]
    if moment == "ledger":
        assert "done" not in acked_before and "failed" not in acked_before  # its answer died with it
    recorded = node.ranks()

    restarted_at = time.time()
    node.start()  # unasked: a coordinator that got `accepted` waits for the answer, it never re-sends
    answer = events.wait_for(lambda e: e.type == "ack" and e.command_id == command.id and e.ts >= restarted_at
                             and e.status != "accepted", 30)
    resent_at = time.time()
    send(command.model_copy(update={"ts": resent_at}))  # a resend (the `accepted` was lost too): same id
    again = events.wait_for(
        lambda e: e.type == "ack" and e.command_id == command.id and e.ts >= resent_at, 30)
    assert (again.status, again.reason) == (answer.status, answer.reason)  # the recorded answer again
    drain(events, 1.5)  # time for a second launch or answer, if there were one
    lines = starts.read_text().splitlines() if starts.exists() else []
    print(f"\n{moment}: acks before the kill {acked_before}; after the restart: {answer.status} "
          f"({answer.reason}); ranks recorded {len(recorded)}; rank starts {len(lines)}")
    if answer.status == "done":  # it was launched before the kill: once, and the same ranks still run
        assert len(lines) == 2 and {int(line.split()[1]) for line in lines} == {r["pid"] for r in recorded}
        assert same_processes(recorded) and len(node.ranks()) == 2
    else:  # killed before the launch: not applied again, so nothing runs
        assert answer.status == "failed" and "not applied again" in answer.reason
        assert lines == [] and processes_with(f"TRAINMEDIC_JOB={job}") == []
    if moment == "ranks":
        assert answer.status == "done"
    later = [e for e in events.seen
             if e.type == "ack" and e.command_id == command.id and e.ts >= restarted_at]
    assert [e.status for e in later] == [answer.status] * 2  # once unasked, once for the resend; no run
    n1 = TrustedKeys.of(keyring.load_signing(node_root / "keys", "node:n1").private.public_key())
    assert [n1.check(encode(e), "ack") for e in later] == [None, None]  # both signed by the node's key
