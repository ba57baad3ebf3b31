"""Training state on disk: node-local per-rank snapshots and shared checkpoints, written atomically.

A file is written under a temporary name and renamed into place, so a reader sees a
whole file or none. File names carry the step (`rank1-step000000042.pt`,
`step000000040.pt`), so the newest can be found without opening anything.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

SNAPSHOTS_KEPT = 2
CHECKPOINTS_KEPT = 3
_STEP = re.compile(r"step(\d+)\.pt$")


def write_atomic(path: Path, payload: dict[str, Any]) -> None:
    """torch.save to a temporary file next to `path`, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load(path: Path) -> dict[str, Any]:
    """A state written by `write_atomic`; tensors land on the CPU. Never unpickles code."""
    return torch.load(path, map_location="cpu", weights_only=True)


def newest(directory: Path, prefix: str) -> tuple[int, Path] | None:
    """(step, path) of the newest `PREFIXstepN.pt` in `directory`, or None."""
    found = list_states(directory, prefix)
    return found[-1] if found else None


def list_states(directory: Path, prefix: str) -> list[tuple[int, Path]]:
    if not directory.is_dir():
        return []
    states = []
    for path in directory.glob(f"{prefix}*.pt"):
        match = _STEP.search(path.name)
        if match:
            states.append((int(match.group(1)), path))
    return sorted(states)


def save_keeping(directory: Path, prefix: str, step: int, payload: dict[str, Any], keep: int) -> Path:
    """Write `PREFIXstepN.pt` atomically and delete all but the newest `keep` of that prefix."""
    path = state_path(directory, prefix, step)
    write_atomic(path, payload)
    for _, old in list_states(directory, prefix)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def state_path(directory: Path, prefix: str, step: int) -> Path:
    """Where `save_keeping` writes `prefix`'s state after `step` steps."""
    return directory / f"{prefix}step{step:09d}.pt"


def snapshot_prefix(rank: int | None) -> str:
    """File-name prefix of one rank's snapshots (or of every rank's, for None)."""
    return "rank" if rank is None else f"rank{rank}-"
