"""Ranks left behind by an executor that died: recorded while they run, killed when it comes back.

Ranks run in their own sessions, so they outlive a crashed executor. The supervisor keeps
STATE_DIR/ranks.json current (pid, process start time, job, rank); a restarted executor
SIGKILLs the process group of every recorded rank that is still the same process (same
start time, so a reused pid is never hit) before it reads commands. Its state is then
STOPPED at the last applied generation: the coordinator decides what runs next.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger(__name__)


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), or None if gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        return None
    return int(fields[19])


def save(path: Path, ranks: list[dict]) -> None:
    """Replace the record of live ranks (atomically: write, fsync, rename)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(ranks, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def reclaim(path: Path, timeout_s: float = 10.0) -> list[dict]:
    """Kill the process groups of recorded ranks that still run; returns the records of those killed."""
    try:
        ranks = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return []
    except ValueError as err:
        log.warning("%s unreadable (%s); no leftover ranks reclaimed", path, err)
        return []
    killed = []
    for rank in ranks:
        pid = int(rank["pid"])
        if start_time(pid) != rank["start"]:
            continue
        log.warning("rank %s of job %s (pid %d) outlived the previous executor: SIGKILL to its group",
                    rank["rank"], rank["job"], pid)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        killed.append(rank)
    deadline = time.monotonic() + timeout_s
    while any(start_time(int(r["pid"])) == r["start"] for r in killed) and time.monotonic() < deadline:
        time.sleep(0.05)
    save(path, [])
    return killed
