"""What a job launcher's answer must be for the executor to believe it (issue 42, attack B3): a pid
that is its child (as the ranks' subreaper), leads its own session, runs as the launcher's user,
started after the request, and is in the job's cgroup where there is one. Anything else is never
signalled nor waited for."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Iterator

import pytest

from trainmedic.recovery.executor.job_trees import JobTrees
from trainmedic.recovery.executor.launcher import JobLauncher, boot_ticks, proc_stat


@pytest.fixture
def launcher() -> Iterator[JobLauncher]:
    trees = JobTrees(warm=False)  # makes this process the subreaper, as the executor is
    launcher = trees.launcher("j")
    yield launcher
    trees.close()


def rank(launcher: JobLauncher, *argv: str) -> int:
    log_fd = os.open(os.devnull, os.O_WRONLY)
    try:
        return launcher.launch(argv, dict(os.environ), log_fd)
    finally:
        os.close(log_fd)


def test_a_rank_it_started_is_proven(launcher: JobLauncher) -> None:
    asked = boot_ticks()
    pid = rank(launcher, "sleep", "30")
    assert launcher.disproof(pid, asked) is None
    stat = proc_stat(pid)
    assert (int(stat[1]), int(stat[3])) == (os.getpid(), pid)  # our child, its own session
    os.kill(pid, 9)
    os.waitpid(pid, 0)


def test_what_it_did_not_start_is_refused(launcher: JobLauncher) -> None:
    plain = subprocess.Popen(["sleep", "30"])  # a child of ours, in our session
    own_session = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        time.sleep(0.05)
        asked = boot_ticks()
        assert launcher.disproof(os.getpid(), asked) == "is not a child of this executor"
        assert launcher.disproof(1, asked) == "is not a child of this executor"
        assert launcher.disproof(plain.pid, asked) == "does not lead a session of its own"
        assert launcher.disproof(own_session.pid, asked) == "started before it was asked for"
        assert launcher.disproof(own_session.pid, 0) is None  # the same, had it been asked for before
        launcher.in_job = lambda pid: False
        assert launcher.disproof(own_session.pid, 0) == "is not in the job's cgroup"
        assert launcher.disproof(2**22 + 1, asked) == "does not exist"
    finally:
        for proc in (plain, own_session):
            proc.kill()
            proc.wait()


def test_a_command_that_cannot_be_exec_d_is_an_oserror_with_its_errno_and_leaves_no_zombie(
        launcher: JobLauncher) -> None:
    def zombies() -> set[int]:  # of this process: other tests' too, so only new ones count
        return {pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
                if (stat := proc_stat(pid)) is not None and stat[0] == "Z" and int(stat[1]) == os.getpid()}

    before = zombies()
    with pytest.raises(FileNotFoundError) as raised:
        rank(launcher, "no-such-command-here", "x")
    assert raised.value.errno == errno.ENOENT and "'no-such-command-here'" in str(raised.value)
    assert zombies() - before == set()
