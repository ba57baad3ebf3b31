"""Issue 42, A4: a uid of its own for each job on a node, from a range no user of /etc/passwd is in;
kept for good, so that no uid ever serves two jobs; the same on every node with the same range unless
another job took it there."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
from pathlib import Path

import pytest

from trainmedic.common.errors import ConfigError
from trainmedic.recovery.executor import job_dirs
from trainmedic.recovery.executor.config import ExecutorConfig
from trainmedic.recovery.executor.job_dirs import RankUser
from trainmedic.recovery.executor.rank_users import JobUids, OneUser


def test_each_job_gets_its_own_uid_and_group_kept_across_restarts(tmp_path: Path) -> None:
    path = tmp_path / "job-uids.json"
    uids = JobUids.parse("2147400000-2147400009", path)
    users = {job: uids.of(job) for job in ("a", "b", "c")}
    assert len({user.uid for user in users.values()}) == 3
    assert all(user.uid == user.gid and uids.owns(user.uid) for user in users.values())
    assert users["a"].name == f"trainmedic-job-{users['a'].uid}"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = JobUids.parse("2147400000-2147400009", path)  # the executor restarted
    assert {job: again.of(job) for job in users} == users
    other_node = JobUids.parse("2147400000-2147400009", tmp_path / "other.json")
    assert other_node.of("b") == users["b"]  # the same range: the same uid, unless taken there


def test_a_taken_uid_is_never_given_to_another_job_and_a_full_range_says_so(tmp_path, caplog) -> None:
    uids = JobUids.parse("2147400000-2147400001", tmp_path / "job-uids.json")
    with caplog.at_level(logging.WARNING):
        taken = [uids.of(job).uid for job in ("a", "b")]
    assert sorted(taken) == [2147400000, 2147400001]
    # "a" and "b" both hash to the range's first uid: b gets the other, and the log says so
    assert "job b runs as uid 2147400001 here, not 2147400000" in caplog.text
    with pytest.raises(OSError, match="every uid of job_uids 2147400000-2147400001 is some job's"):
        uids.of("one more")
    assert not uids.owns(2147400002) and not uids.owns(1000)


@pytest.mark.parametrize(("text", "words"), [
    ("61184", "is not FIRST-LAST"),
    ("10-20", "is not FIRST-LAST"),
    ("70000-60000", "is not FIRST-LAST"),
    ("0-65535", "is not FIRST-LAST"),
])
def test_a_range_that_cannot_be_is_a_configuration_error(tmp_path, text, words) -> None:
    with pytest.raises(ConfigError, match=words):
        JobUids.parse(text, tmp_path / "job-uids.json")


def test_a_range_with_a_user_or_group_of_the_node_in_it_is_refused(tmp_path) -> None:
    with pytest.raises(ConfigError, match="uid 65534 is user nobody's"):
        JobUids.parse("65000-65535", tmp_path / "job-uids.json")
    subprocess.run(["groupadd", "-g", "2147400500", "trainmedic-test-group"], check=True)
    try:
        with pytest.raises(ConfigError, match="gid 2147400500 is group trainmedic-test-group's"):
            JobUids.parse("2147400000-2147400999", tmp_path / "job-uids.json")
    finally:
        subprocess.run(["groupdel", "trainmedic-test-group"], check=True)


def test_job_uids_and_run_as_exclude_each_other(tmp_path) -> None:
    with pytest.raises(ValueError, match="exclude each other"):
        ExecutorConfig(node="n1", state_dir=tmp_path, insecure=True, run_as="nobody",
                       rank_user=RankUser("nobody", 65534, 65534), job_uids="61184-65519")
    assert ExecutorConfig(node="n1", state_dir=tmp_path, insecure=True, job_uids="61184-65519").job_uids


def test_one_user_owns_only_its_uid_and_never_the_executors() -> None:
    assert OneUser(RankUser("r", 2147400000, 2147400000)).owns(2147400000)
    assert not OneUser(RankUser("r", os.geteuid(), 0)).owns(os.geteuid())
    assert not OneUser(None).apart


def test_a_submissions_checkpoint_directory_is_made_its_jobs_uids_below_an_allowed_dir_only(tmp_path) -> None:
    assert os.geteuid() == 0, "only root gives a directory away"
    user = RankUser("trainmedic-job-2147400000", 2147400000, 2147400000)
    allowed = tmp_path / "ckpt"
    allowed.mkdir()
    where = allowed / "llm" / "job" / "20261206T000000.000Z-1"
    job_dirs.prepare_checkpoints(str(where), (str(tmp_path / "elsewhere"),), user)
    assert not (allowed / "llm").exists()  # not below an allowed dir: the ranks make it
    job_dirs.prepare_checkpoints(str(where), (str(allowed),), user)
    job, own = (where.parent.stat(), where.stat())
    assert (job.st_uid, stat.S_IMODE(job.st_mode)) == (0, 0o755)
    assert (own.st_uid, own.st_gid, stat.S_IMODE(own.st_mode)) == (user.uid, user.gid, 0o700)


def test_what_is_there_is_never_given_away_nor_followed(tmp_path) -> None:
    """The job names the path: root must not take over /tmp (`checkpoint_dir: /`, job `tmp`), nor
    follow a link the job's ranks made."""
    user = RankUser("trainmedic-job-2147400000", 2147400000, 2147400000)
    allowed = tmp_path / "ckpt"
    (allowed / "tmp").mkdir(parents=True)
    os.chmod(allowed / "tmp", 0o1777)
    job_dirs.prepare_checkpoints(str(allowed / "tmp" / "s1"), (str(allowed),), user)
    assert (allowed / "tmp").stat().st_mode & 0o7777 == 0o1777  # there before: unchanged
    victim = tmp_path / "victim"
    victim.mkdir()
    (allowed / "link").symlink_to(victim)
    job_dirs.prepare_checkpoints(str(allowed / "link" / "job" / "s1"), (str(allowed),), user)
    assert list(victim.iterdir()) == [] and victim.stat().st_uid == 0
