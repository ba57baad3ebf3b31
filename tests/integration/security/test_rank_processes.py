"""Issue 42's attacks on what the root executor does with a job's processes, each against a real
executor (root, in this process) whose ranks run as a real rank user:

- B3: a rank forges its launcher's answer, so that the executor takes a root process for the next
  job's rank (and kills and waits on it);
- A5: a rank leaves a daemon in a session of its own, which outlived its job;
- B5: a rank's orphans, left to the executor (their subreaper) as zombies, were never reaped;
- a job's processes are as many as its cgroup allows, no more.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers.waiting import wait_until
from tests.integration.executor.conftest import (  # noqa: F401 (fixtures)
    events,
    free_port_fixture,
    send,
    start_executor,
)
from trainmedic.recovery.executor.core.admission import AdmissionPolicy
from trainmedic.recovery.executor.job_dirs import RankUser
from trainmedic.schemas import Command, CommandAction, WorkerSpec

pytestmark = pytest.mark.kafka

PR_GET_DUMPABLE = 3
POLICY = AdmissionPolicy(allowed_executables=("sh",),
                         allowed_modules=("tests.integration.executor", "tests.integration.security"))


def launch(send, job: str, command: tuple[str, ...]) -> None:  # noqa: F811 (the fixture, passed)
    worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                        ranks=(0,), world_size=1, master_addr="127.0.0.1", master_port=1,
                        command=command)
    send(Command(ts=time.time(), node="n1", id=f"start-{job}", job=job, generation=0,
                 action=CommandAction.START, worker=worker))


def exit_of(events, job: str):  # noqa: F811 (the fixture, passed)
    return events.wait_for(lambda e: e.type == "worker_exit" and e.job == job, timeout_s=90)


def stat_of(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def test_a_forged_launcher_answer_never_makes_a_root_process_a_rank(
        start_executor, send, events, rank_user: RankUser, jobs_dir: Path) -> None:  # noqa: F811
    victim = subprocess.Popen(["sleep", "300"], start_new_session=True)  # root, and this process's child
    try:
        executor = start_executor("n1", warm_start=True, run_as=rank_user.name, rank_user=rank_user,
                                  jobs_dir=jobs_dir, admission=POLICY)
        attacker, honest = f"attack-{uuid.uuid4().hex[:6]}", f"honest-{uuid.uuid4().hex[:6]}"
        launch(send, attacker, (sys.executable, "-m", "tests.integration.security.rank_attacks",
                                str(victim.pid)))
        assert exit_of(events, attacker).exit_code == 0
        log = executor.executor.config.job_dir(attacker, "s1") / "logs" / "g0-rank0.log"
        assert json.loads(log.read_text().splitlines()[-1]) == {"wrote": []}, log.read_text()
        launch(send, honest, (sys.executable, "-m", "tests.integration.executor.user_probe"))
        ended = exit_of(events, honest)
        assert (ended.exit_code, ended.pid != victim.pid) == (0, True)
        assert victim.poll() is None  # neither killed nor waited for
    finally:
        victim.kill()
        victim.wait()


def test_nothing_a_job_started_outlives_it_nor_stays_a_zombie(
        start_executor, send, events, rank_user: RankUser, jobs_dir: Path) -> None:  # noqa: F811
    executor = start_executor("n1", warm_start=False, run_as=rank_user.name, rank_user=rank_user,
                              jobs_dir=jobs_dir, admission=POLICY)
    job = f"leaves-{uuid.uuid4().hex[:6]}"
    # a daemon in a session of its own, and 20 orphans that end at once (the executor is their subreaper)
    script = ('setsid sleep 300 & echo "daemon=$!"; i=0; '
              'while [ $i -lt 20 ]; do (true &); i=$((i+1)); done; sleep 0.5')

    def zombies() -> set[int]:
        """The rank user's zombies left to this process (the executor's): other tests' are not ours."""
        return {pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
                if (stat := stat_of(pid)) is not None and stat[0] == "Z" and int(stat[1]) == os.getpid()
                and _owner(pid) == rank_user.uid}

    before = zombies()
    launch(send, job, ("sh", "-c", script))
    assert exit_of(events, job).exit_code == 0
    log = executor.executor.config.job_dir(job, "s1") / "logs" / "g0-rank0.log"
    daemon = int(log.read_text().split("daemon=")[1].split()[0])
    wait_until(lambda: stat_of(daemon) is None, timeout_s=10, what=f"the job's daemon {daemon} is gone")
    wait_until(lambda: not zombies() - before, timeout_s=10, what="no zombie is left to the executor")


def test_a_job_has_no_more_processes_than_its_cgroup_allows(
        start_executor, send, events, rank_user: RankUser, jobs_dir: Path) -> None:  # noqa: F811
    start_executor("n1", warm_start=False, run_as=rank_user.name, rank_user=rank_user, jobs_dir=jobs_dir,
                   admission=POLICY, job_pids_max=20)
    job = f"forks-{uuid.uuid4().hex[:6]}"
    launch(send, job, ("sh", "-c", 'i=0; while [ $i -lt 60 ]; do sleep 30 & i=$((i+1)); done; exit 3'))
    ended = exit_of(events, job)
    assert (ended.exit_code, ended.output_tail) == (2, "sh: 0: Cannot fork")  # sh could not start them all


    def sleepers() -> list[int]:
        return [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
                if (stat := stat_of(pid)) is not None and stat[0] != "Z" and _owner(pid) == rank_user.uid
                and _comm(pid) == "sleep"]

    wait_until(lambda: not sleepers(), timeout_s=10, what="the job's end took every one of its processes")


def _comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def test_a_rank_that_errs_after_it_said_it_waits_is_restarted_not_kept(
        start_executor, send, events, free_port: int) -> None:  # noqa: F811
    """Issue 42, E: `worker_waiting` then an error made the restart a no-op for that rank."""
    job = f"waits-{uuid.uuid4().hex[:6]}"
    start_executor("n1", warm_start=False, admission=POLICY)

    def command(action: CommandAction, generation: int) -> Command:
        worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                            ranks=(0,), world_size=1, master_addr="127.0.0.1",
                            master_port=free_port,
                            command=(sys.executable, "-m", "tests.integration.security.waits_then_fails"))
        return Command(ts=time.time(), node="n1", id=f"{action}-{job}-{generation}", job=job,
                       generation=generation, action=action, worker=worker)

    send(command(CommandAction.START, 0))
    first = events.wait_for(lambda e: e.type == "worker_error" and e.job == job, timeout_s=90)
    send(command(CommandAction.RESTART, 1))
    stopped = events.wait_for(lambda e: e.type == "worker_exit" and e.job == job, timeout_s=60)
    assert (stopped.pid, stopped.generation, stopped.stopped) == (first.pid, 0, True)
    events.wait_for(lambda e: e.type == "worker_start" and e.job == job and e.generation == 1, timeout_s=90)


def test_the_executor_is_not_dumpable(start_executor) -> None:  # noqa: F811
    """Issue 42, item 3: a process of the executor's user (a rank, without run_as) could ptrace it and
    read its memory (its credentials, its node key)."""
    start_executor("n1", warm_start=False, admission=POLICY)  # in this process, as the tests run it
    assert ctypes.CDLL(None, use_errno=True).prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0
