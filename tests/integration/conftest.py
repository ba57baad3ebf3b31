"""Fixtures of the integration tiers that more than one folder uses."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainmedic.recovery.executor.job_dirs import RankUser

RANK_USER = "trainmedic-rank"


def _grant_traverse(paths: list[Path]) -> list[tuple[Path, int]]:
    """Let other users pass the directories above `paths` (this machine's interpreter is under /root,
    0700); returns each changed directory with its mode before, to put back."""
    changed = []
    for path in paths:
        for parent in reversed(path.parents):
            mode = parent.stat().st_mode
            if not mode & stat.S_IXOTH and parent not in dict(changed):
                changed.append((parent, stat.S_IMODE(mode)))
                os.chmod(parent, stat.S_IMODE(mode) | stat.S_IXOTH)
    return changed


@pytest.fixture(scope="module")
def rank_user() -> Iterator[RankUser]:
    """The system user ranks run as (made when missing, and then deleted after), able to run this
    interpreter and read the tests' code, as a deployment's rank user must be."""
    assert os.geteuid() == 0, "an executor switches ranks to another user only as root"
    made = subprocess.run(["id", RANK_USER], capture_output=True).returncode != 0
    if made:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", RANK_USER],
                       check=True)
    opened = _grant_traverse([Path(sys.executable), Path(os.path.realpath(sys.executable)), Path.cwd()])
    try:
        yield RankUser.named(RANK_USER, os.geteuid())
    finally:
        for path, mode in opened:
            os.chmod(path, mode)
        if made:
            subprocess.run(["userdel", RANK_USER], check=True)


@pytest.fixture
def jobs_dir() -> Iterator[Path]:
    """The executor's jobs_dir, where the rank user can reach its job's directory (tmp_path cannot be
    passed: pytest makes its folders 0700)."""
    with tempfile.TemporaryDirectory() as where:
        os.chmod(where, 0o755)
        yield Path(where) / "n1"


