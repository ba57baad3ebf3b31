"""One `trainmedic run` per home: a second is refused with who holds it and what to do; the home is
free again once the first ends, or dies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trainmedic.run.lock import RunBusy, only_run


def test_a_second_run_in_the_same_home_is_refused_and_told_what_to_do(tmp_path: Path) -> None:
    with only_run(tmp_path, "first-job"):
        with pytest.raises(RunBusy) as busy, only_run(tmp_path, "second-job"):
            pass
        assert "first-job" in str(busy.value) and "TRAINMEDIC_HOME=" in str(busy.value)
        with only_run(tmp_path / "other-home", "third-job"):  # another home is another run's
            pass
    with only_run(tmp_path, "second-job"):  # free once the first ended
        pass


def test_the_home_is_free_once_the_holder_is_killed(tmp_path: Path) -> None:
    code = ("import sys, time; from pathlib import Path; from trainmedic.run.lock import only_run\n"
            "with only_run(Path(sys.argv[1]), 'held'):\n    print('held', flush=True); time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunBusy, match=f"pid {holder.pid}"), only_run(tmp_path, "mine"):
            pass
    finally:
        holder.kill()
        holder.wait(timeout=30)
    with only_run(tmp_path, "mine"):  # the kernel let go of the dead holder's lock
        pass


@pytest.fixture
def first_rank(tmp_path: Path):
    """A live rank of a first run in `tmp_path`/home, recorded where its executor on local-0 keeps it."""
    from trainmedic.recovery.executor.leftovers import save, start_time
    from trainmedic.run.session import run_layout

    rank = subprocess.Popen(["sleep", "60"], start_new_session=True)
    registry = run_layout(tmp_path / "home", "first-job").executor_dir("local-0") / "ranks.json"
    registry.parent.mkdir(parents=True)
    save(registry, [{"pid": rank.pid, "start": start_time(rank.pid), "job": "first-job", "generation": 0,
                     "rank": 0, "world_size": 1}])
    yield rank, registry
    rank.kill()
    rank.wait(timeout=30)


def test_a_second_run_in_a_held_home_starts_nothing_and_leaves_the_first_runs_ranks(
        tmp_path: Path, monkeypatch, capsys, first_rank) -> None:
    """Issue 33: a second `run` in the same home adopted and killed the first's rank. Without the lock
    in `run_job`, this run would start its services (here: fail the test) on the first's state."""
    from trainmedic.cli import main

    def started(*args, **kwargs):
        raise AssertionError("the second run started its services on the first run's home")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRAINMEDIC_HOME", str(tmp_path / "home"))
    monkeypatch.setattr("trainmedic.run.session.local_deployment", started)
    rank, _ = first_rank
    with only_run(tmp_path / "home", "first-job"):
        assert main(["run", "--job-id", "second-job", "--", "python", "-c", "pass"]) == 2
    assert "another `trainmedic run` is using" in capsys.readouterr().err
    assert rank.poll() is None  # the first run's rank runs on


def test_a_run_in_another_home_never_sees_the_first_runs_ranks(tmp_path: Path, first_rank) -> None:
    from trainmedic.recovery.executor.core.ledger_state import LedgerState
    from trainmedic.recovery.executor.leftovers import take_over
    from trainmedic.run.session import run_layout

    rank, registry = first_rank
    other = run_layout(tmp_path / "other-home", "second-job").executor_dir("local-0") / "ranks.json"
    assert take_over(other, LedgerState()).launched == {} and rank.poll() is None
    killed = take_over(registry, LedgerState(), timeout_s=5.0)  # what the first home's executor would do
    assert [r.pid for r, _ in killed.kill] == [rank.pid]
