"""What belongs to one rank alone: its random number generators and its place in the data, saved in
its snapshot and given back on a restore onto the same world size (docs/executor.md, "The worker runtime").
"""

from __future__ import annotations

import io
import pickle
import random
from pathlib import Path
from typing import Any, Protocol

import torch


class Stateful(Protocol):
    """What the runtime saves and restores: a torch.optim.Optimizer, a data loader or sampler, or
    anything like them."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


MISSING = "no snapshot of this rank number at that step and generation here"


def capture(world_size: int, data: Stateful | None, device: torch.device | None,
            check: bool = True) -> dict[str, Any]:
    """This rank's RNG streams and data position now (after a step: what the next one starts from).
    With `check` (the first capture of a run is enough: it serializes the state once more), raises
    TypeError when `data`'s state is not what a snapshot can hold (plain values and tensors:
    snapshots are read without unpickling code), rather than write a snapshot no restore could
    read."""
    version, internal, gauss = random.getstate()  # 625 ints: one tensor, not 625 pickled objects
    rng = {"torch": torch.get_rng_state(),
           "python": [version, torch.tensor(internal, dtype=torch.int64), gauss]}
    if device is not None and device.type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state(device)
    position = None if data is None else data.state_dict()
    if check and position is not None:
        _check_loadable(position, type(data).__name__)
    return {"world_size": world_size, "rng": rng, "data": position}


def _check_loadable(state: dict[str, Any], owner: str) -> None:
    written = io.BytesIO()
    torch.save(state, written)
    written.seek(0)
    try:
        torch.load(written, weights_only=True)
    except pickle.UnpicklingError as err:
        raise TypeError(f"{owner}.state_dict() holds what a snapshot cannot keep: only tensors, numbers, "
                        f"strings, lists, tuples and dicts load without unpickling code ({err})") from None


def read(snapshot: Path) -> dict[str, Any] | None:
    """What `snapshot` (this rank number's file of the restored generation and step, on this node)
    saved as the rank's own; None when there is no such file (the rank ran on another node, or
    was killed before it) or it cannot be read."""
    try:
        return torch.load(snapshot, map_location="cpu", weights_only=True, mmap=True).get("own")
    except (OSError, RuntimeError, pickle.UnpicklingError):
        return None


def apply(saved: dict[str, Any] | None, world_size: int, data: Stateful | None,
          device: torch.device | None, missing: str = MISSING,
          ) -> tuple[bool, str]:
    """Take back `saved` (what `capture` returned; None, for the reason `missing`) when it was this
    world size's: whether it was, and what was done, in words for the restore's log line."""
    if saved is None:
        return False, f"RNG and data position not restored ({missing})"
    if saved["world_size"] != world_size:
        return False, (f"RNG and data position not restored (saved at world size {saved['world_size']}, "
                       f"now {world_size})")
    rng = saved["rng"]
    torch.set_rng_state(rng["torch"])
    version, internal, gauss = rng["python"]
    random.setstate((version, tuple(internal.tolist()), gauss))
    if "cuda" in rng and device is not None and device.type == "cuda":
        torch.cuda.set_rng_state(rng["cuda"], device)
    if data is None:
        return True, "RNG restored"
    if saved["data"] is None:
        return True, "RNG restored; no data position was saved"
    data.load_state_dict(saved["data"])
    return True, "RNG and data position restored"
