"""Where an executor's jobs' report sockets live: a folder of the executor's user per state directory,
short (a socket path has at most 107 bytes) and stable across its restarts, a folder per job in it."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


def socket_folder(state_dir: Path, tmp: str | None = None) -> Path:
    """Where the executor of `state_dir` keeps its jobs' sockets: short (a socket path has at most 107
    bytes), stable across its restarts (ranks it adopts keep reporting), only this user's to write."""
    digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:16]
    return Path(tmp or tempfile.gettempdir()) / f"trainmedic-{os.getuid()}" / digest


def job_socket(folder: Path, job: str) -> Path:
    """The socket of `job`'s ranks in `folder`: JOB_DIGEST/reports.sock."""
    return folder / hashlib.sha256(job.encode()).hexdigest()[:16] / "reports.sock"


def owned_folder(path: Path) -> None:
    """Make `path` (the sockets' folder) a folder of this user's that others may enter but not
    change (0711); refuse one that another user owns or may write."""
    path.mkdir(mode=0o711, exist_ok=True)
    info = path.lstat()
    if not path.is_dir() or path.is_symlink() or info.st_uid != os.getuid():
        raise PermissionError(f"{path} is not a folder of this user's: refusing to listen for ranks there")
    os.chmod(path, 0o711)


def remove_sockets(folder: Path) -> None:
    """`folder` and what is in it (sockets, and job folders of sockets), if it is there: never
    anything but the executor's own (it alone writes there)."""
    if not folder.is_dir() or folder.is_symlink():
        return
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            remove_sockets(entry)
        else:
            entry.unlink(missing_ok=True)
    folder.rmdir()
