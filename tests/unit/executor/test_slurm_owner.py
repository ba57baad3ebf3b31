"""On a node Slurm schedules, ranks start only for the trainmedic jobs of the Slurm job that owns the
node (the prolog's file): none while no job owns it, none from a file a rank could have written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainmedic.recovery.executor.core.slurm_owner import refusal
from trainmedic.recovery.executor.owner_file import read_owner


@pytest.mark.parametrize("job", ["llm-slurm42", "llm-a-slurm42-r3"])
def test_the_owning_slurm_jobs_trainmedic_jobs_may_start(job: str) -> None:
    assert refusal(job, "42 alice\n", "/run/trainmedic/slurm-job") is None


@pytest.mark.parametrize(("job", "text", "says"), [
    ("llm-slurm42", None, "no Slurm job owns this node"),
    ("llm-slurm4", "42 alice\n", "Slurm job 42's, and job llm-slurm4 is not one of its"),
    ("llm-slurm420", "42 alice\n", "is not one of its"),
    ("llm", "42 alice\n", "is not one of its"),
    ("slurm42", "42 alice\n", "is not one of its"),
    ("llm-slurm42", "\n", "names no Slurm job id"),
    ("llm-slurm42", "４２ alice", "names no Slurm job id"),  # digits, but not ASCII ones
    ("llm-slurm42", "42x alice", "names no Slurm job id"),
    ("llm-slurm42", "not trusted: owned by uid 1000, mode 644", "names no Slurm job id: 'not trusted"),
])
def test_any_other_job_or_no_owner_is_refused_saying_why(job: str, text: str | None, says: str) -> None:
    assert says in (refusal(job, text, "/run/trainmedic/slurm-job") or "")


def test_the_owner_file_is_read_only_where_no_rank_could_have_written_it(tmp_path: Path) -> None:
    owner = tmp_path / "slurm-job"
    assert read_owner(owner) is None
    owner.write_text("42 alice\n")
    owner.chmod(0o644)
    assert read_owner(owner) == "42 alice\n"
    owner.chmod(0o666)
    assert read_owner(owner).startswith("not trusted")
    owner.chmod(0o644)
    os.chown(owner, 1000, 1000)
    assert read_owner(owner).startswith("not trusted: owned by uid 1000")
    link = tmp_path / "link"
    link.symlink_to(owner)
    assert read_owner(link).startswith("unreadable")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert read_owner(fifo) == "not a regular file"
    tmp_path.chmod(0o777)  # a folder others may write: a rank could put its own file there
    assert read_owner(owner).startswith("not trusted: its folder")
