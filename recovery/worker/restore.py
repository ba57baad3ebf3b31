"""Restore after a (re)start: every rank offers what state it can read (a replica's snapshot, a
checkpoint), the newest wins and is broadcast (docs/executor.md, "Restore design, and its limits").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmedic.recovery.worker import state_files
from trainmedic.recovery.worker.env import WorkerEnv
from trainmedic.schemas import RestoreSource

log = logging.getLogger(__name__)

REPLICA, CHECKPOINT = "replica", "checkpoint"


@dataclass(frozen=True, slots=True)
class Offer:
    """State one rank can load: `step` completed steps saved by `generation`, from a replica
    snapshot or a checkpoint."""

    rank: int
    step: int
    kind: str
    path: str
    generation: int = state_files.UNNAMED


def local_offers(env: WorkerEnv) -> list[Offer]:
    """What this rank could load, by the restore source its environment names."""
    source = env.restore
    offers: list[Offer] = []
    if source.kind == "none":
        return offers
    if source.kind == REPLICA and env.snapshot_dir and source.node in (None, env.node):
        found = state_files.newest(Path(env.snapshot_dir), state_files.snapshot_prefix(source.rank))
        if found:
            generation, step, path = found
            offers.append(Offer(env.rank, step, REPLICA, str(path), generation))
    checkpoint = _checkpoint_offer(env)
    if checkpoint is not None:
        offers.append(checkpoint)
    return offers


def checkpoint_location(env: WorkerEnv) -> Path | None:
    """Where this rank looks for checkpoints: `restore.path` (a checkpoint itself, or a directory
    of them), else the job's checkpoint dir; None when neither is set."""
    where = env.restore.path or env.checkpoint_dir
    return Path(where) if where else None


def _checkpoint_offer(env: WorkerEnv) -> Offer | None:
    where = checkpoint_location(env)
    if where is None:
        return None
    if where.is_file():
        saved = state_files.load(where)
        return Offer(env.rank, int(saved["step"]), CHECKPOINT, str(where),
                     int(saved.get("generation", state_files.UNNAMED)))
    found = state_files.newest(where, "")
    if found is None:
        return None
    generation, step, path = found
    return Offer(env.rank, step, CHECKPOINT, str(path), generation)


def choose(offers: list[Offer]) -> Offer | None:
    """The newest state by (generation, step): a generation that went back to an older step is
    the timeline, not the steps of one it left; on a tie a replica before a checkpoint, then the
    lowest rank."""
    if not offers:
        return None
    return max(offers, key=lambda o: (o.generation, o.step, o.kind == REPLICA, -o.rank))


def fallback_warning(source: RestoreSource, chosen: Offer | None) -> str | None:
    """What to say when a restore named a replica and none offered its state, else None: the job
    went back to a checkpoint, or to step 0, and lost every step since."""
    if source.kind != REPLICA or (chosen is not None and chosen.kind == REPLICA):
        return None
    named = f"rank {source.rank}" if source.rank is not None else "any rank"
    where = source.node or "its node"
    used = ("started fresh at step 0" if chosen is None
            else f"restored step {chosen.step} from the checkpoint {chosen.path}")
    return f"no replica snapshot of {named} on {where}: {used}; the steps after it are lost"


def restore_state(env: WorkerEnv, model: Any, optimizer: Any, device: Any = None) -> tuple[int, Offer | None]:
    """Load the chosen state into `model` and `optimizer` on every rank; returns (step, source)."""
    import torch.distributed as dist

    if env.restore.kind == "none":
        return 0, None
    gathered: list[list[Offer] | None] = [None] * env.world_size
    dist.all_gather_object(gathered, local_offers(env))
    chosen = choose([offer for offers in gathered for offer in offers or []])
    if chosen is None:
        log.warning("restore %s: no rank has a snapshot or checkpoint; starting fresh", env.restore.kind)
        return 0, None
    mine = env.rank == chosen.rank
    box: list[dict[str, Any] | None] = [state_files.load(Path(chosen.path)) if mine else None]
    dist.broadcast_object_list(box, src=chosen.rank, device=device)
    payload = box[0]
    model.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    return int(payload["step"]), chosen
