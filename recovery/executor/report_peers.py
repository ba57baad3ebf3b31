"""Who is at the other end of a rank's report socket: the pid and uid the kernel gives (SO_PEERCRED, never
what the process says), and the launched rank that pid is or descends from, up its parents in /proc (a
data loader's workers report for their rank).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from pathlib import Path

from trainmedic.recovery.executor.core.reports import LaunchedRank

ANCESTORS = 16  # how far up the parent chain a process may be from the rank it belongs to

Resolve = Callable[[int], LaunchedRank | None]


def peer_credentials(conn: socket.socket) -> tuple[int, int]:
    """The pid and uid of the process at the other end (as the kernel says, not the process)."""
    credentials = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", credentials)
    return pid, uid


def parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[1])  # the name in parentheses may hold spaces


def rank_of(pid: int, known: Resolve,
            parent: Callable[[int], int | None] = parent_of) -> tuple[int, LaunchedRank] | None:
    """The launched rank `pid` is, or descends from (at most ANCESTORS up), with that rank's pid."""
    current: int | None = pid
    for _ in range(ANCESTORS):
        if current is None or current <= 1:
            return None
        launched = known(current)
        if launched is not None:
            return current, launched
        current = parent(current)
    return None
