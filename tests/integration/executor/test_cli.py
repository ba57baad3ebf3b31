"""`trainmedic executor` as a real process: insecure mode, leftover ranks a crash left that must not
run (the job was being stopped), clean exit. Adopting the ranks that may run:
tests/integration/chaos/test_executor_restart.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainmedic.schemas import Command, CommandAction, WorkerSpec

from .conftest import processes_of


def start_cli(kafka, state: Path, log: Path, stop_grace_s: float = 2.0) -> subprocess.Popen:
    env = {**os.environ, "TRAINMEDIC_KAFKA_BOOTSTRAP": kafka.bootstrap,
           "TRAINMEDIC_TOPIC_PREFIX": kafka.topic_prefix}
    env.pop("TRAINMEDIC_CLUSTER_KEY", None)
    env.pop("TRAINMEDIC_CLUSTER_KEY_FILE", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainmedic.cli", "executor", "--node", "n1", "--insecure", "--state-dir",
         str(state), "--jobs-dir", str(state.with_name(f"{state.name}-jobs")), "--stop-grace-s",
         str(stop_grace_s), "--allowed-executables", "sh", "--ranks-as-root"],
        env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while "reading " not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"executor did not start:\n{log.read_text()}")
        time.sleep(0.1)
    return proc


@pytest.fixture
def cli_procs():
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.kafka
def test_ranks_of_a_job_being_stopped_when_the_executor_crashed_are_killed_by_the_next(
        kafka, send, events, tmp_path, cli_procs):
    job = f"cli-{os.getpid()}-{time.monotonic_ns()}"
    cli_procs.append(first := start_cli(kafka, tmp_path / "state", tmp_path / "first.log", stop_grace_s=60))
    worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                        ranks=(0, 1), world_size=2, master_addr="127.0.0.1", master_port=1,
                        command=("sh", "-c", "trap '' TERM; sleep 60 & wait"))  # they ignore SIGTERM
    send(Command(ts=time.time(), node="n1", id="start", job=job, generation=0, action=CommandAction.START,
                 worker=worker), key=None)
    events.wait_for(lambda e: e.type == "ack" and e.command_id == "start" and e.status == "done")
    assert "INSECURE" in (tmp_path / "first.log").read_text()
    stop = send(Command(ts=time.time(), node="n1", id="stop", job=job, generation=0,
                        action=CommandAction.STOP), key=None)
    events.wait_for(lambda e: e.type == "ack" and e.command_id == "stop" and e.status == "accepted")

    os.kill(first.pid, signal.SIGKILL)  # the executor crashes in the stop's grace period; its ranks live on
    first.wait()
    assert len(processes_of(job)) == 4  # two ranks, each a shell and its sleep

    cli_procs.append(second := start_cli(kafka, tmp_path / "state", tmp_path / "second.log"))
    assert processes_of(job) == []  # the ledger says the job is being stopped: not adoptable
    exits = [events.wait_for(lambda e, r=r: e.type == "worker_exit" and e.rank == r) for r in (0, 1)]
    assert {e.signal for e in exits} == {signal.SIGKILL}
    send(stop.model_copy(update={"ts": time.time()}), key=None)  # the coordinator's resend
    done = events.wait_for(lambda e: e.type == "ack" and e.command_id == "stop" and e.status != "accepted")
    assert done.status == "done" and "restarted while stopping" in done.reason

    second.send_signal(signal.SIGTERM)
    assert second.wait(30) == 0
    assert "executor for node n1 stopped" in (tmp_path / "second.log").read_text()
