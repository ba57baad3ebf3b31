"""Ranks left running by an executor that died: recorded while they run (STATE_DIR/ranks.json), taken
over, killed or reported when it comes back; a reused pid is never adopted nor hit (docs/executor.md,
"Restarts: adopting the ranks").
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from pathlib import Path

from trainmedic.recovery.executor.core.ledger_state import LedgerState
from trainmedic.recovery.executor.core.restart import Leftovers, RecordedRank, sort_leftovers

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


def save(path: Path, ranks: list[dict] | dict) -> None:
    """Replace the record of live ranks (or another record of the executor's, as JSON) atomically
    (write, fsync, rename), readable by the executor's user only."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), 0o600)  # a .tmp left by an older version may be 0644
        json.dump(ranks, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def load(path: Path) -> list[RecordedRank]:
    """The ranks recorded in `path`; none when it is missing or unreadable (logged)."""
    try:
        return [RecordedRank.of(record) for record in json.loads(path.read_text("utf-8"))]
    except FileNotFoundError:
        return []
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        log.warning("%s unreadable (%s); no leftover ranks taken over", path, err)
        return []


def take_over(path: Path, ledger: LedgerState, timeout_s: float = 10.0) -> Leftovers:
    """Sort the recorded ranks by what /proc says now; kill the groups of those not adoptable."""
    recorded = load(path)
    found = sort_leftovers(recorded, {rank.pid: start_time(rank.pid) for rank in recorded}, ledger)
    for rank in found.adopt:
        log.warning("rank %d of job %s g%d (pid %d) outlived the previous executor: adopted, it keeps "
                    "running", rank.rank, rank.job, rank.generation, rank.pid)
    for rank in found.ended:
        log.warning("rank %d of job %s g%d (pid %d) ended while no executor watched: exit status unknown",
                    rank.rank, rank.job, rank.generation, rank.pid)
    killed = []
    for rank, why in found.kill:
        log.warning("rank %d of job %s g%d (pid %d) outlived the previous executor but must not run (%s): "
                    "SIGKILL to its group", rank.rank, rank.job, rank.generation, rank.pid, why)
        try:
            os.killpg(rank.pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        killed.append(rank)
    deadline = time.monotonic() + timeout_s
    while any(start_time(r.pid) == r.start for r in killed) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found
