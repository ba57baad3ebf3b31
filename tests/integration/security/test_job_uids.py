"""Issue 42, A4: two jobs' ranks on one node, with the executor root. With one `run_as` user for
every job, a rank of one job ptrace-attached to the other's ranks, read their environment and planted
a file in their snapshots. With `job_uids`, each job's ranks run as a uid of their own, and none of
that works; the launchers are the jobs' uids too, the zygote the executor's."""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers.waiting import wait_until
from tests.integration.executor.conftest import (  # noqa: F401 (fixtures)
    events,
    send,
    start_executor,
)
from trainmedic.recovery.executor.core.admission import AdmissionPolicy
from trainmedic.recovery.executor.job_dirs import RankUser
from trainmedic.recovery.executor.launcher import proc_uid
from trainmedic.schemas import Command, CommandAction, WorkerSpec

pytestmark = pytest.mark.kafka

POLICY = AdmissionPolicy(allowed_modules=("tests.integration.security",))
UIDS = "2147400000-2147400099"  # no user of /etc/passwd
ATTACKS = (sys.executable, "-m", "tests.integration.security.neighbour_attacks")


def launch(send, job: str, *args: str) -> None:  # noqa: F811 (the fixture, passed)
    worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32, ranks=(0,), world_size=1,
                        master_addr="127.0.0.1", master_port=1, command=(*ATTACKS, *args))
    send(Command(ts=time.time(), node="n1", id=f"start-{job}", job=job, generation=0,
                 action=CommandAction.START, worker=worker))


def last_line(path: Path) -> dict | None:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    return json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None


def test_a_rank_of_one_job_can_neither_trace_nor_read_nor_write_another_jobs(
        start_executor, send, events, rank_user: RankUser, jobs_dir: Path) -> None:  # noqa: F811
    # rank_user: for its side effect, that other users may run this interpreter and read the tests
    executor = start_executor("n1", job_uids=UIDS, jobs_dir=jobs_dir, admission=POLICY)
    config = executor.executor.config
    victim, attacker = f"victim-{uuid.uuid4().hex[:6]}", f"attacker-{uuid.uuid4().hex[:6]}"
    launch(send, victim, "wait")
    home = config.job_dir(victim, "s1")
    said = wait_until(lambda: last_line(home / "logs" / "g0-rank0.log"), timeout_s=60,
                      what="the victim's uid")
    launch(send, attacker, "attack", str(said["pid"]), str(home))
    ended = events.wait_for(lambda e: e.type == "worker_exit" and e.job == attacker, timeout_s=60)
    attack = last_line(config.job_dir(attacker, "s1") / "logs" / "g0-rank0.log")
    assert ended.exit_code == 0 and attack is not None
    assert attack["worked"] == [], attack
    first, last = (int(n) for n in UIDS.split("-"))
    assert said["uid"] == said["gid"] and first <= said["uid"] <= last
    assert first <= attack["uid"] <= last and attack["uid"] != said["uid"]
    trees = executor.executor.supervisor.trees
    assert proc_uid(trees._zygote.pid) == 0
    assert {proc_uid(pid) for pid in trees.servers() - {trees._zygote.pid}} <= {said["uid"], attack["uid"]}
    assert json.loads((config.state_dir / "job-uids.json").read_text()) == {
        victim: said["uid"], attacker: attack["uid"]}
