"""A job's own settings on a real node: its env and workdir reach real ranks, cold and warm; its
failure settings become the rank's variables; a missing workdir fails the start with the reason;
and what the executor reports on acks (node_joined, ranks_finished) is signed with its node's key."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.integration.executor.conftest import POLICY, node_key
from trainmedic.recovery.coordinator.core.blame import cannot_run
from trainmedic.recovery.signing import TrustedKeys
from trainmedic.schemas import Command, CommandAction, FailureSettings, WorkerSpec, encode

REPO = Path(__file__).resolve().parents[3]
JOB_ENV = {"LEARNING_RATE": "3e-4", "NCCL_SOCKET_IFNAME": "job-choice",
           "RANK": "9", "TRAINMEDIC_CLUSTER_KEY": "from-the-job"}  # the contract wins; a key never passes


def start(send, job: str, worker: WorkerSpec, generation: int = 0) -> Command:
    return send(Command(ts=time.time(), node="n1", id=f"start-{job}-g{generation}", job=job,
                        generation=generation, action=CommandAction.START, worker=worker))


def signed_by_n1(report) -> bool:
    return TrustedKeys.of(node_key("n1").private.public_key()).check(encode(report), "report") is None


def settled(send, events) -> None:
    """Wait until everything n1 reported before now was read: a stop of a job it never ran is acked
    after it, on the same partition (acks are keyed by node)."""
    marker = f"marker-{uuid.uuid4().hex[:8]}"
    send(Command(ts=time.time(), node="n1", id=marker, job=marker, generation=0, action=CommandAction.STOP))
    events.wait_for(lambda e: e.type == "ack" and e.command_id == marker and e.status == "done")


@pytest.mark.kafka
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_rank_gets_its_jobs_env_and_failure_settings_and_runs_in_its_workdir(
        start_executor, send, events, monkeypatch, tmp_path: Path, warm: bool) -> None:
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "executors-choice")
    # The rank runs `-m tests.…` from its workdir: the repository must be on its path (pytest puts it
    # on its own sys.path only), passed as a rank's PYTHONPATH is, from the executor's environment.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))
    workdir = tmp_path / "work"
    workdir.mkdir()
    # `python -m` in a workdir: admitted only where the policy lists it (it imports from there first)
    listed = POLICY.model_copy(update={"allowed_dirs": (str(tmp_path),), "job_env": tuple(JOB_ENV)})
    start_executor("n1", warm_start=warm, admission=listed)
    seen, job = tmp_path / "seen.json", f"env-{uuid.uuid4().hex[:8]}"
    worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                        ranks=(0,), world_size=1, master_addr="127.0.0.1", master_port=1,
                        command=(sys.executable, "-m", "tests.integration.executor.env_rank", str(seen)),
                        env=JOB_ENV, workdir=str(workdir),
                        failure=FailureSettings(hang_floor_s=90.0, collective_timeout_s=300.0))
    start(send, job, worker)
    ended = events.wait_for(lambda e: e.type == "worker_exit" and e.job == job, timeout_s=90)
    assert ended.exit_code == 0
    found = json.loads(seen.read_text())
    env = found["environ"]
    assert (env["LEARNING_RATE"], env["NCCL_SOCKET_IFNAME"]) == ("3e-4", "job-choice")
    assert env["RANK"] == "0" and env["TRAINMEDIC_JOB"] == job
    assert "TRAINMEDIC_CLUSTER_KEY" not in env and "from-the-job" not in found["proc"]
    assert (env["TRAINMEDIC_HANG_FLOOR_S"], env["TRAINMEDIC_COLLECTIVE_TIMEOUT_S"]) == ("90.0", "300.0")
    assert found["cwd"] == str(workdir) and found["path0"] == str(workdir)  # as `python -m` started there


@pytest.mark.kafka
def test_a_workdir_missing_on_the_node_fails_the_start_with_the_reason(start_executor, send, events,
                                                                         tmp_path: Path) -> None:
    start_executor("n1")
    missing = tmp_path / "not-here"
    worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                        ranks=(0,), world_size=1, master_addr="127.0.0.1", master_port=1,
                        command=("sleep", "30"), workdir=str(missing))
    command = start(send, "nowhere", worker)
    failed = events.wait_for(
        lambda e: e.type == "ack" and e.command_id == command.id and e.status != "accepted")
    assert failed.status == "failed"
    assert failed.reason.endswith(f"workdir {missing} is not a directory on this node: no rank started")
    assert cannot_run(failed.reason)  # the coordinator blames the job, never the node


@pytest.mark.kafka
def test_the_executor_announces_itself_signed_once_it_reads_its_commands(start_executor, events) -> None:
    start_executor("n1")
    joined = events.wait_for(lambda e: e.type == "node_joined" and e.node == "n1")
    assert signed_by_n1(joined)


@pytest.mark.kafka
def test_the_executor_of_a_node_joins_only_once_its_agents_heartbeat_was_delivered(start_executor, send,
                                                                                   events) -> None:
    heard = threading.Event()
    start_executor("n1", heard=heard)
    settled(send, events)  # its join, had it been announced at its start, would be read before this
    assert [e for e in events.seen if e.type == "node_joined" and e.node == "n1"] == []
    heard.set()
    joined = events.wait_for(lambda e: e.type == "node_joined" and e.node == "n1", timeout_s=30)
    assert signed_by_n1(joined)


@pytest.mark.kafka
def test_ranks_finished_is_reported_once_signed_when_every_local_rank_exits_0(start_executor, send,
                                                                               events) -> None:
    start_executor("n1")
    worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                        ranks=(2, 3), world_size=4, master_addr="127.0.0.1", master_port=1,
                        command=("sh", "-c", 'test "$RANK" = 2 && sleep 1; exit 0'))
    start(send, "fine", worker, generation=1)
    finished = events.wait_for(lambda e: e.type == "ranks_finished" and e.job == "fine")
    exits = [e for e in events.seen if e.type == "worker_exit" and e.job == "fine"]
    assert sorted((e.rank, e.exit_code) for e in exits) == [(2, 0), (3, 0)]  # both, before it
    assert (finished.node, finished.generation, finished.ranks) == ("n1", 1, (2, 3))
    assert signed_by_n1(finished)
    settled(send, events)
    assert len([e for e in events.seen if e.type == "ranks_finished"]) == 1


@pytest.mark.kafka
def test_no_ranks_finished_when_one_rank_fails_or_the_ranks_are_stopped(start_executor, send, events) -> None:
    start_executor("n1")
    worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                        ranks=(0, 1), world_size=2, master_addr="127.0.0.1", master_port=1,
                        command=("sh", "-c", 'test "$RANK" = 0 && exit 0; exit 3'))
    start(send, "broken", worker)
    stopped = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                         ranks=(0,), world_size=1, master_addr="127.0.0.1", master_port=1,
                         command=("sh", "-c", 'trap "exit 0" TERM; sleep 30 & wait'))  # exits 0 when stopped
    start(send, "stopped", stopped)
    events.wait_for(lambda e: e.type == "ack" and e.command_id == "start-stopped-g0" and e.status == "done")
    send(Command(ts=time.time(), node="n1", id="stop-stopped", job="stopped", generation=0,
                 action=CommandAction.STOP))
    events.wait_for(lambda e: e.type == "ack" and e.command_id == "stop-stopped" and e.status == "done")
    exits = [events.wait_for(lambda e, r=r: e.type == "worker_exit" and e.job == "broken" and e.rank == r)
             for r in (0, 1)]
    assert [e.exit_code for e in exits] == [0, 3]
    settled(send, events)
    assert not [e for e in events.seen if e.type == "ranks_finished"]
