"""The ranks' files and identity: job directories outside the home, the run_as user, no user site."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import stat
import sys
import time
from pathlib import Path

import pytest

from tests.integration.executor.test_warm_rank_reports import exit_of
from trainmedic.common.errors import ConfigError
from trainmedic.recovery.executor import cli, job_dirs
from trainmedic.recovery.executor.config import ExecutorConfig
from trainmedic.recovery.executor.job_dirs import RankUser
from trainmedic.recovery.executor.launcher import Zygote
from trainmedic.recovery.executor.supervisor import Supervisor
from trainmedic.schemas import WorkerSpec

NOBODY = RankUser("nobody", 65534, 65534)
# A venv's Python never reads a user site; the Python it was made from does (as the executor's user).
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)
SITE = Path(".local", "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages")


def build(tmp_path: Path, monkeypatch, *argv: str):
    monkeypatch.setenv("TRAINMEDIC_HOME", str(tmp_path / "home"))
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--node", "n1", "--insecure", *argv])
    return cli.build_config(cli.OPTIONS, cli.EXECUTOR, args)


def test_the_jobs_directories_are_beside_the_home_and_the_executors_state_in_it(tmp_path, monkeypatch):
    config = build(tmp_path, monkeypatch, "--ranks-as-root")
    assert config.state_dir == tmp_path / "home" / "executor" / "n1"
    assert config.jobs_dir == tmp_path / "home-jobs" / "n1"
    assert config.job_dir("llm", "S") == tmp_path / "home-jobs" / "n1" / "llm" / "S"
    assert config.snapshot_dir("llm", "S") == tmp_path / "home-jobs" / "n1" / "llm" / "S" / "snapshots"
    assert not config.snapshot_dir("llm", "S").is_relative_to(tmp_path / "home")


def test_without_run_as_the_executor_warns_that_ranks_share_its_user(tmp_path, monkeypatch, caplog) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: NOBODY.uid)  # not root: root needs a rank user, or says so
    with caplog.at_level(logging.WARNING, "trainmedic.executor"):
        config = build(tmp_path, monkeypatch)
    assert config.rank_user is None
    warned = [r.getMessage() for r in caplog.records if "RANKS RUN AS THE EXECUTOR'S OWN" in r.getMessage()]
    assert len(warned) == 1 and "can read this node's keys and credentials" in warned[0]


def test_run_as_is_a_flag_a_variable_or_a_yaml_key_and_is_looked_up(tmp_path, monkeypatch, caplog) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with caplog.at_level(logging.WARNING, "trainmedic.executor"):
        assert build(tmp_path, monkeypatch, "--run-as", "nobody").rank_user == NOBODY
    assert not caplog.records
    monkeypatch.setenv("TRAINMEDIC_EXECUTOR_RUN_AS", "65534")
    assert build(tmp_path, monkeypatch).rank_user == NOBODY
    monkeypatch.delenv("TRAINMEDIC_EXECUTOR_RUN_AS")
    (tmp_path / "executor.yaml").write_text("run_as: nobody\n")
    assert build(tmp_path, monkeypatch, "--config", str(tmp_path / "executor.yaml")).rank_user == NOBODY


@pytest.mark.parametrize(("who", "euid", "words"), [
    ("no-such-user-here", 0, "run_as: no user 'no-such-user-here' on this node"),
    ("root", 0, "ranks running as root could read everything"),
    ("0", 0, "ranks running as root"),
    ("nobody", 1000, "switching ranks to nobody needs an executor running as root, and this one runs as "
                     "uid 1000"),
])
def test_a_rank_user_that_cannot_be_is_a_configuration_error(who, euid, words) -> None:
    with pytest.raises(ConfigError, match=words):
        RankUser.named(who, euid)


def test_a_config_naming_run_as_without_its_looked_up_user_is_refused(tmp_path: Path) -> None:
    # else its ranks would silently run as the executor's user
    with pytest.raises(ValueError, match="run_as 'nobody' is not looked up"):
        ExecutorConfig(node="n1", state_dir=tmp_path, insecure=True, run_as="nobody")
    config = ExecutorConfig(node="n1", state_dir=tmp_path / "n1", insecure=True, run_as="nobody",
                            rank_user=NOBODY)
    assert config.jobs_dir == tmp_path / "n1-jobs"  # built without one: beside the state dir


def test_a_job_directory_is_the_rank_users_own_0700_in_a_0711_jobs_dir(tmp_path, monkeypatch) -> None:
    owned: list[tuple[Path, int, int]] = []
    monkeypatch.setattr(os, "fchown", lambda fd, uid, gid: owned.append(
        (Path(os.readlink(f"/proc/self/fd/{fd}")), uid, gid)))
    job = tmp_path / "jobs" / "n1" / "llm" / "20261205T190845.123Z-3f2a9c1b"
    assert job_dirs.prepare(job, NOBODY) == job / "logs"
    for path in (job, job / "logs", job / "snapshots"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
        assert (path, NOBODY.uid, NOBODY.gid) in owned
    for path in (job.parent, job.parent.parent):  # the job's and the node's: the executor's
        assert stat.S_IMODE(path.stat().st_mode) == 0o711
        assert path not in {where for where, _, _ in owned}
    os.chmod(job, 0o755)  # a restart puts it right again
    job_dirs.prepare(job, None)
    assert stat.S_IMODE(job.stat().st_mode) == 0o700


def submission_dirs(job: Path, count: int) -> list[Path]:
    """`count` submissions of `job`, oldest first, each with a log and a snapshot."""
    made = []
    for number in range(count):
        where = job / f"20261205T19{number:02d}00.000Z-0000000{number}"
        job_dirs.prepare(where, None)
        (where / "logs" / "g0-rank0.log").write_text(f"submission {number}\n")
        (where / "snapshots" / "rank0-g0-step000000001.pt").write_bytes(b"x")
        made.append(where)
    return made


def test_a_new_submission_removes_earlier_ones_snapshots_and_keeps_their_logs_a_while(tmp_path) -> None:
    """No restore reads another submission's snapshots, so they go when a newer one starts; the logs
    of the newest KEPT_SUBMISSIONS stay for `job logs`."""
    job = tmp_path / "jobs" / "n1" / "llm"
    *older, current, newer = submission_dirs(job, job_dirs.KEPT_SUBMISSIONS + 3)
    job_dirs.prune(current)
    assert all(not (where / "snapshots").exists() for where in older)
    kept = [where for where in older if where.exists()]
    assert kept == older[-(job_dirs.KEPT_SUBMISSIONS - 1):]
    assert all((where / "logs" / "g0-rank0.log").exists() for where in kept)
    for where in (current, newer):  # its own, and a newer one (another deployment's) are left alone
        assert (where / "snapshots" / "rank0-g0-step000000001.pt").exists()


def test_pruning_follows_no_link_the_job_left(tmp_path) -> None:
    precious = tmp_path / "precious"
    (precious / "snapshots").mkdir(parents=True)
    (precious / "snapshots" / "keep").write_text("mine")
    job = tmp_path / "jobs" / "n1" / "llm"
    old, current = submission_dirs(job, 2)
    shutil.rmtree(old / "snapshots")
    (old / "snapshots").symlink_to(precious / "snapshots")  # the job's own directory: a rank did it
    (job / "20261205T180000.000Z-00000000").symlink_to(precious)  # named as an older submission
    job_dirs.prune(current)
    assert (precious / "snapshots" / "keep").read_text() == "mine"
    assert not (old / "snapshots").exists() and (old / "logs" / "g0-rank0.log").exists()


def test_pruning_opens_nothing_but_directories_and_stops_at_a_depth(tmp_path) -> None:
    """A rank may leave a FIFO where a directory was (opening it would block the executor) or a
    tree deeper than any real one: pruning unlinks the one and leaves the other, and goes on."""
    job = tmp_path / "jobs" / "n1" / "llm"
    old, current = submission_dirs(job, 2)
    (job / ".cache").mkdir()  # not a submission (an earlier layout's HOME): never pruned
    (job / ".cache" / "snapshots").mkdir()
    os.mkfifo(old / "snapshots" / "rank0-g0-step000000002.pt")
    deep = old / "snapshots" / "deep"
    deep.joinpath(*["d"] * (job_dirs.MAX_DEPTH + 2)).mkdir(parents=True)
    job_dirs.prune(current)
    assert not (old / "snapshots" / "rank0-g0-step000000002.pt").exists()
    assert deep.exists() and not (old / "snapshots" / "rank0-g0-step000000001.pt").exists()
    assert (job / ".cache" / "snapshots").exists() and (old / "logs").exists()


def evil_home(tmp_path: Path) -> tuple[Path, Path]:
    """A HOME whose user site-packages holds a .pth that leaves a mark when Python starts."""
    home, mark = tmp_path / "evil-home", tmp_path / "owned"
    (home / SITE).mkdir(parents=True)
    (home / SITE / "evil.pth").write_text(f"import pathlib; pathlib.Path({str(mark)!r}).write_text('ran')\n")
    return home, mark


def test_a_rank_has_its_job_directory_as_home_and_never_runs_a_user_site_pth(tmp_path: Path) -> None:
    home, mark = evil_home(tmp_path)
    job = tmp_path / "jobs" / "llm" / "s1"
    (job / SITE).mkdir(parents=True)  # its own HOME's site too: a rank of an earlier generation wrote it
    (job / SITE / "evil.pth").write_text((home / SITE / "evil.pth").read_text())
    probe = ("import os, site; "
             "print(site.ENABLE_USER_SITE, os.environ['HOME'], os.environ['PYTHONNOUSERSITE'])")
    spec = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                      ranks=(0,), world_size=1, master_addr="h", master_port=1,
                      command=(BASE_PYTHON, "-c", probe))
    sup = Supervisor()
    sup.launch("llm", 0, spec, [{**os.environ, "HOME": str(home)}], job)
    assert exit_of(sup).exit_code == 0
    assert (job / "logs" / "g0-rank0.log").read_text().split() == ["False", str(job), "1"]
    assert not mark.exists()


def test_the_zygote_imports_nothing_from_the_directory_it_starts_in(tmp_path: Path, monkeypatch) -> None:
    """It runs as the executor's user (root): a module planted where the executor was started (a
    shared directory) must not be what it imports. The ranks it forks still find their modules in
    their own directory, as `python -m` does."""
    marker = tmp_path / "imported"
    (tmp_path / "setproctitle.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    zygote = Zygote(warm=False)
    try:
        zygote.spawn().close()  # it served a request: everything it imports, it has
    finally:
        zygote.close()
    assert not marker.exists()


def test_the_fork_server_starts_without_a_user_site(tmp_path: Path) -> None:
    home, _ = evil_home(tmp_path)
    launcher = Zygote(warm=True, env={**os.environ, "HOME": str(home)})
    try:
        pid, deadline = launcher.pid, time.monotonic() + 10
        while not Path(f"/proc/{pid}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)  # read at once, it is sometimes still empty
        assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:5] == [
            sys.executable.encode(), b"-s", b"-P", b"-m", b"trainmedic.recovery.executor.forkserver"]
        assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[6] == b"--warm"
        assert b"PYTHONNOUSERSITE=1" in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    finally:
        launcher.close()


def test_a_link_the_job_left_in_its_directory_is_never_followed(tmp_path: Path) -> None:
    """The job owns its directory: a `logs` or a log file made a link (to /etc, to the keys) must
    not make the executor, root with run_as, change or write what it points to."""
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir(mode=0o755)
    job = tmp_path / "jobs" / "llm" / "s1"
    job_dirs.prepare(job, None)
    (job / "logs").rmdir()
    (job / "logs").symlink_to(elsewhere)
    with pytest.raises(OSError):
        job_dirs.prepare(job, None)
    assert oct(elsewhere.stat().st_mode & 0o777) == "0o755"  # not made 0700 (nor the rank's)
    (job / "logs").unlink()
    job_dirs.prepare(job, None)
    target = elsewhere / "cron"
    (job / "logs" / "g1-rank0.log").symlink_to(target)
    with pytest.raises(OSError):
        job_dirs.open_log(job / "logs" / "g1-rank0.log")
    assert not target.exists()
    os.close(job_dirs.open_log(job / "logs" / "g2-rank0.log"))  # a plain one is opened
