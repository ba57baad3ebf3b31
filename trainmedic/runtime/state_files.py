"""Training state on disk: node-local per-rank snapshots and shared checkpoints, written atomically,
named by generation and step (`rank1-g3-step000000042.pt`) so that the newest is found without
opening anything (docs/executor.md, "Restore design, and its limits").
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

from trainmedic.common.signals import alive

SNAPSHOTS_KEPT = 2
CHECKPOINTS_KEPT = 3
_NAME = re.compile(r"(?:g(\d+)-)?step(\d+)\.pt$")
DCP_METADATA = ".metadata"  # what DCP writes last: a checkpoint directory with it is whole
UNNAMED = -1  # the generation of a state whose file name gives none


def write_atomic(path: Path, payload: dict[str, Any]) -> None:
    """torch.save to a temporary file next to `path`, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def remove_orphans(directory: Path, prefix: str) -> None:
    """Delete the temporary files of `prefix`'s states (`.PREFIXgG-stepN.pt.tmp-PID`) whose
    writer is gone (a rank killed while writing): never renamed into place, they would pile up.
    A live writer's are left alone. For node-local snapshot dirs only: on shared storage a pid
    is another host's."""
    for tmp in directory.glob(f".{prefix}g*-step*.pt.tmp-*"):
        pid = tmp.name.rsplit(".tmp-", 1)[1]
        if pid.isdigit() and not alive(int(pid)):
            tmp.unlink(missing_ok=True)


def load(path: Path, mmap: bool = False) -> dict[str, Any]:
    """A state written by `write_atomic`; tensors land on the CPU (with `mmap`, mapped from the file:
    read only when touched). Never unpickles code."""
    return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)


def newest(directory: Path, prefix: str) -> tuple[int, int, Path] | None:
    """(generation, step, path) of the newest `PREFIX[gG-]stepN.pt` in `directory`, or None."""
    found = list_states(directory, prefix)
    return found[-1] if found else None


def list_states(directory: Path, prefix: str) -> list[tuple[int, int, Path]]:
    """(generation, step, path) of `prefix`'s states in `directory`, oldest first: by (generation,
    step), since a generation that went back to an older step (a restore from a checkpoint) is the
    job's timeline, and the higher steps of the one it left are not. A name without a generation
    (`rank1-step000000042.pt`, written before generations were named) counts as older than any
    generation (UNNAMED)."""
    if not directory.is_dir():
        return []
    states = []
    for path in directory.glob(f"{prefix}*.pt"):
        match = _NAME.search(path.name)
        if match:
            generation = UNNAMED if match.group(1) is None else int(match.group(1))
            states.append((generation, int(match.group(2)), path))
    return sorted(states)


def save_keeping(directory: Path, prefix: str, generation: int, step: int, payload: dict[str, Any],
                 keep: int) -> Path:
    """Write `PREFIXgG-stepN.pt` atomically and delete all but the newest `keep` of that prefix."""
    path = state_path(directory, prefix, generation, step)
    write_atomic(path, payload)
    for _, _, old in list_states(directory, prefix)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def save_snapshot(directory: Path, prefix: str, generation: int, step: int, payload: dict[str, Any],
                  keep: int) -> Path:
    """`save_keeping` into a node-local snapshot dir, where the temporary files of a writer killed
    half way are removed too (`remove_orphans`)."""
    path = save_keeping(directory, prefix, generation, step, payload, keep)
    remove_orphans(directory, prefix)
    return path


def state_path(directory: Path, prefix: str, generation: int, step: int) -> Path:
    """Where `save_keeping` writes `prefix`'s state of `generation` after `step` steps."""
    return directory / f"{prefix}g{generation}-step{step:09d}.pt"


def snapshot_prefix(rank: int | None) -> str:
    """File-name prefix of one rank's snapshots (or of every rank's, for None)."""
    return "rank" if rank is None else f"rank{rank}-"


def dcp_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """(step, path) of the whole DCP checkpoints (`stepN/` with DCP's metadata) in `directory`, oldest
    first; a save still being written (`stepN.tmp-gG/`) is not one."""
    if not directory.is_dir():
        return []
    return sorted((int(p.name.removeprefix("step")), p) for p in directory.glob("step*")
                  if p.is_dir() and p.name.removeprefix("step").isdigit() and (p / DCP_METADATA).is_file())


def holds_checkpoint(directory: Path) -> bool:
    """Whether `directory` holds a whole checkpoint: of a whole model (`gG-stepN.pt`) or DCP's."""
    return bool(list_states(directory, "") or dcp_checkpoints(directory))
