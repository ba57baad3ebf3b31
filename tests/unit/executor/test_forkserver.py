"""The warm launcher: which commands it forks, and ranks forked by it supervised like any other."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainmedic.recovery.executor.job_trees import JobTrees
from trainmedic.recovery.executor.supervisor import Supervisor
from trainmedic.schemas import WorkerSpec

PY = sys.executable


@pytest.fixture
def warm_supervisor() -> Iterator[Supervisor]:
    sup = Supervisor(trees=JobTrees(warm=True))
    yield sup
    sup.stop_all(grace_s=0.1)


def start(sup: Supervisor, tmp_path: Path, *args: str, **env: str) -> int:
    spec = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                      ranks=(0,), world_size=1, master_addr="h", master_port=1,
                      command=("nice", "-n", "5", PY, "-m", "tests.unit.executor.rank_probe", *args))
    return sup.launch("j", 0, spec, [{**os.environ, **env}], tmp_path)[0]


def wait_exit(sup: Supervisor, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        exits = sup.reap()
        if exits:
            return exits[0]
        time.sleep(0.02)
    raise AssertionError("the rank did not end")


def test_a_warm_rank_gets_its_env_args_log_session_and_exit_code(warm_supervisor, tmp_path: Path) -> None:
    pid = start(warm_supervisor, tmp_path, "--flag", PROBE="hello", PROBE_EXIT="3")
    ended = wait_exit(warm_supervisor)
    assert (ended.pid, ended.exit_code, ended.signal) == (pid, 3, None)
    log = (tmp_path / "logs" / "g0-rank0.log").read_text()
    assert "argv=['--flag'] probe=hello pgid_is_pid=True" in log


def test_a_warm_rank_killed_by_a_signal_reports_it(warm_supervisor, tmp_path: Path) -> None:
    pid = start(warm_supervisor, tmp_path, "--sleep")
    deadline = time.monotonic() + 30
    while "probe=" not in (tmp_path / "logs" / "g0-rank0.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    ended = wait_exit(warm_supervisor)
    assert (ended.exit_code, ended.signal) == (None, signal.SIGKILL)


def test_an_unimportable_module_fails_in_its_rank_with_the_reason(warm_supervisor, tmp_path) -> None:
    spec = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                      ranks=(0,), world_size=1, master_addr="h", master_port=1,
                      command=(PY, "-m", "no_such_module_here"))
    warm_supervisor.launch("j", 0, spec, [dict(os.environ)], tmp_path)
    ended = wait_exit(warm_supervisor)
    assert ended.exit_code == 1
    assert "No module named no_such_module_here" in (tmp_path / "logs" / "g0-rank0.log").read_text()
