"""Keeping a rank's process across a restart (docs/executor.md, "Survivors keep their processes"):
its executor names the next generation in a file of the job's directory (the rank's HOME), the rank
waits for it and re-forms its process group. No torch: the executor names the file it writes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from trainmedic.common.errors import ConfigError
from trainmedic.runtime.env import WorkerEnv

REFORM_DIR = "reform"
REFORM_WAIT_S = 120.0  # how long a rank whose peer failed waits for the next generation, alive
POLL_S = 0.05


def file_name(rank: int) -> str:
    return f"rank{rank}.json"


def reform_path(job_dir: Path, rank: int) -> Path:
    """Where the executor names the next generation of `rank` (in the job's directory; the executor
    writes it with `job_dirs.put`, never through a link the rank may have made there)."""
    return job_dir / REFORM_DIR / file_name(rank)


def wait(job_dir: Path, rank: int, after: int, timeout_s: float, clock=time.monotonic,
         sleep=time.sleep) -> WorkerEnv | None:
    """The rank's side: its next contract once its executor wrote one for a generation after
    `after`, else None after `timeout_s` (the executor stopped keeping it, or never will)."""
    path = reform_path(job_dir, rank)
    deadline = clock() + timeout_s
    while True:
        found = _read(path)
        if found is not None and found.generation > after:
            return found
        if clock() >= deadline:
            return None
        sleep(POLL_S)


def _read(path: Path) -> WorkerEnv | None:
    try:
        return WorkerEnv.from_env(json.loads(path.read_text()))
    except (OSError, ValueError, ConfigError):  # not there yet, or not whole: wait on
        return None
