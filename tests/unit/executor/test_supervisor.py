"""The supervisor with real (tiny, non-torch) processes: exits, signals, no orphans."""

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainmedic.recovery.executor.supervisor import Supervisor
from trainmedic.schemas import WorkerSpec


@pytest.fixture
def supervisor() -> Iterator[Supervisor]:
    sup = Supervisor()
    yield sup
    sup.stop_all(grace_s=0.1)


def spec(script: str, ranks=(0,)) -> WorkerSpec:
    return WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                      ranks=ranks, world_size=len(ranks), master_addr="h", master_port=1,
                      command=("sh", "-c", script))


def launch(sup: Supervisor, tmp_path: Path, script: str, ranks=(0,)) -> list[int]:
    envs = [{**os.environ, "RANK": str(rank)} for rank in ranks]
    return sup.launch("j", 0, spec(script, ranks), envs, tmp_path)


def wait_exits(sup: Supervisor, count: int, timeout_s: float = 10.0):
    exits, deadline = [], time.monotonic() + timeout_s
    while len(exits) < count and time.monotonic() < deadline:
        exits += sup.reap()
        time.sleep(0.02)
    return exits


def grandchild_pid(log: Path, timeout_s: float = 5.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log.read_text().strip() if log.exists() else ""
        if text:
            return int(text.splitlines()[0])
        time.sleep(0.02)
    raise TimeoutError(f"{log} stayed empty")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_exit_codes_and_signals_are_reported(supervisor, tmp_path):
    pids = launch(supervisor, tmp_path, 'test "$RANK" = 0 && exit 3; sleep 60', ranks=(0, 1))
    exits = wait_exits(supervisor, 1)
    assert [(e.rank, e.exit_code, e.signal) for e in exits] == [(0, 3, None)]
    os.kill(pids[1], signal.SIGKILL)
    exits = wait_exits(supervisor, 1)
    assert [(e.rank, e.exit_code, e.signal) for e in exits] == [(1, None, 9)]
    assert supervisor.alive("j") == 0


def test_stop_kills_the_whole_process_group(supervisor, tmp_path):
    launch(supervisor, tmp_path, "sleep 60 & echo $!; wait")
    child = grandchild_pid(tmp_path / "logs" / "g0-rank0.log")
    assert alive(child)
    exits = supervisor.stop("j", grace_s=5)
    assert [e.signal for e in exits] == [signal.SIGTERM]
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(child)


def test_a_rank_that_ignores_sigterm_is_killed_after_the_grace_period(supervisor, tmp_path):
    launch(supervisor, tmp_path, 'trap "" TERM; echo ready; sleep 60 & wait; sleep 60')
    grandchild_pid_file = tmp_path / "logs" / "g0-rank0.log"
    deadline = time.monotonic() + 5
    while not grandchild_pid_file.read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    exits = supervisor.stop("j", grace_s=0.3)
    assert [e.signal for e in exits] == [signal.SIGKILL]


def test_a_dead_rank_leaves_nothing_behind_in_its_group(supervisor, tmp_path):
    pids = launch(supervisor, tmp_path, "sleep 60 & echo $!; wait")
    child = grandchild_pid(tmp_path / "logs" / "g0-rank0.log")
    os.kill(pids[0], signal.SIGKILL)
    assert [e.signal for e in wait_exits(supervisor, 1)] == [9]
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(child)


def test_a_command_that_cannot_start_starts_nothing(supervisor, tmp_path):
    bad = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                     ranks=(0,), world_size=1, master_addr="h", master_port=1, command=("/nonexistent",))
    with pytest.raises(OSError):
        supervisor.launch("j", 0, bad, [dict(os.environ)], tmp_path)
    assert supervisor.alive("j") == 0


def test_an_adopted_rank_is_signalled_stopped_and_its_end_noticed_with_an_unknown_status(supervisor):
    import subprocess

    from trainmedic.recovery.executor import leftovers
    from trainmedic.recovery.executor.core.restart import RecordedRank

    # started by "a previous executor": a process in its own session, not launched by this supervisor
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    try:
        start = leftovers.start_time(proc.pid)
        supervisor.adopt((RecordedRank(proc.pid, start, "j", 3, 1, 2),))
        assert supervisor.pids("j") == {1: proc.pid} and supervisor.reap() == []
        [ended] = supervisor.stop("j", grace_s=5.0)
        assert (ended.job, ended.generation, ended.rank, ended.pid) == ("j", 3, 1, proc.pid)
        assert (ended.exit_code, ended.signal, ended.clean) == (None, None, False)
        assert "exit status unknown" in ended.reason
        assert proc.wait(5) == -signal.SIGTERM  # it really got the stop's SIGTERM
    finally:
        proc.kill()
        proc.wait()


def test_an_adopted_pid_running_another_process_is_reported_ended_and_never_signalled(supervisor):
    import subprocess

    from trainmedic.recovery.executor import leftovers
    from trainmedic.recovery.executor.core.restart import RecordedRank

    other = subprocess.Popen(["sleep", "60"], start_new_session=True)  # the pid, reused by someone else
    try:
        stale = leftovers.start_time(other.pid) - 1
        supervisor.adopt((RecordedRank(other.pid, stale, "j", 0, 0, 1),))
        [ended] = supervisor.reap()
        assert ended.pid == other.pid and ended.reason
        time.sleep(0.1)
        assert other.poll() is None  # not hit
    finally:
        other.kill()
        other.wait()
