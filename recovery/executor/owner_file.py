"""The Slurm owner file as the executor reads it (`--slurm-owner-file`; docs/slurm.md, "A node service
instead"): the job that owns the node, which a prolog run as root writes; `core/slurm_owner.py` decides."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from trainmedic.recovery.executor.config import ExecutorConfig
from trainmedic.recovery.executor.core import slurm_owner


def read(config: ExecutorConfig) -> tuple[str | None, str]:
    """(what the node's owner file says, its path), for `slurm_owner.refusal`: `{node}` in the
    configured path is the node's name."""
    assert config.slurm_owner_file is not None
    path = Path(str(config.slurm_owner_file).replace("{node}", config.node))
    return read_owner(path), str(path)


def read_owner(path: Path) -> str | None:
    """The Slurm owner file's first bytes (a prolog run as root writes it), None when there is none: a
    regular file only, never followed through a link or opened when it is a FIFO, in a folder that is no
    link, and only where root wrote both and no one else may: a rank must not name its own job."""
    try:
        folder = os.lstat(path.parent)
        if not stat.S_ISDIR(folder.st_mode) or folder.st_uid != 0 or folder.st_mode & 0o022:
            return f"not trusted: its folder {path.parent} is not a folder only root may write"
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as err:
        return f"unreadable: {err.strerror}"
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            return "not a regular file"
        if found.st_uid != 0 or found.st_mode & 0o022:
            return f"not trusted: owned by uid {found.st_uid}, mode {found.st_mode & 0o777:o}"
        return os.read(fd, slurm_owner.MAX_BYTES).decode(errors="replace")
    finally:
        os.close(fd)
