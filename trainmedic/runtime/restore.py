"""Restore after a (re)start: every rank offers what state of its submission it can read (a replica's
snapshot, a checkpoint; the checkpoint it resumed from last), the newest wins and is broadcast
(docs/executor.md, "Restore design, and its limits").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmedic.runtime import resume, state_files
from trainmedic.runtime.env import WorkerEnv
from trainmedic.schemas import RestoreSource

log = logging.getLogger(__name__)

REPLICA, CHECKPOINT = "replica", "checkpoint"


@dataclass(frozen=True, slots=True)
class Offer:
    """State one rank can load: `step` completed steps saved by `generation`, from a replica
    snapshot or a checkpoint; `resumed`: a checkpoint of another submission, the one the job's
    `resume` names; `named`: on the node the restore source names."""

    rank: int
    step: int
    kind: str
    path: str
    generation: int = state_files.UNNAMED
    resumed: bool = False
    named: bool = False


def local_offers(env: WorkerEnv) -> list[Offer]:
    """What this rank could load, unless its restore source is `none`: the newest snapshot on its
    node (any rank's: a data-parallel model is the same on every rank after a step, and the node
    the source names may hold an older one than another survivor), this submission's newest
    checkpoint, and the checkpoint it resumed from. Its snapshot and checkpoint directories are
    this submission's own, so whatever the source names, nothing older than the newest state of
    the submission that survives is chosen."""
    source = env.restore
    offers: list[Offer] = []
    if source.kind == "none":
        return offers
    if env.snapshot_dir:
        found = state_files.newest(Path(env.snapshot_dir), state_files.snapshot_prefix(None))
        if found:
            generation, step, path = found
            offers.append(Offer(env.rank, step, REPLICA, str(path), generation,
                                named=source.kind == REPLICA and source.node in (None, env.node)))
    if env.checkpoint_dir:
        offers += _checkpoint_offers(env, Path(env.checkpoint_dir), resumed=False)
    if env.resume:
        try:
            offers += _checkpoint_offers(env, resume.location(env), resumed=True)
        except resume.ResumeRefused as err:  # fatal only if nothing else is offered: `restore_state`
            log.warning("rank %d: %s", env.rank, err)
    return offers


def _checkpoint_offers(env: WorkerEnv, where: Path, resumed: bool) -> list[Offer]:
    """The newest whole-model checkpoint at `where` (a checkpoint, or a directory of them). A file
    that is not one (unreadable, foreign) is no offer, and says why in the rank's log: the restore
    decides once every rank's offers are in, never one rank alone."""
    try:
        if where.is_file():
            saved = state_files.load(where, mmap=True)  # its step: nothing of the tensors is read
            return [Offer(env.rank, int(saved["step"]), CHECKPOINT, str(where),
                          int(saved.get("generation", state_files.UNNAMED)), resumed=resumed)]
    except Exception as err:
        log.warning("rank %d: %s is not a checkpoint this rank can read (%s)", env.rank, where, err)
        return []
    found = state_files.newest(where, "")
    if found is None:
        return []
    generation, step, path = found
    return [Offer(env.rank, step, CHECKPOINT, str(path), generation, resumed=resumed)]


def choose(offers: list[Offer]) -> Offer | None:
    """The submission's newest state by (generation, step): a generation that went back to an older
    step is the timeline, not the steps of one it left; the checkpoint it resumed from only when it
    has none of its own. On a tie a replica before a checkpoint, the named node's, then the lowest
    rank."""
    if not offers:
        return None
    return max(offers, key=lambda o: (not o.resumed, o.generation, o.step, o.kind == REPLICA, o.named,
                                      -o.rank))


def fallback_warning(source: RestoreSource, chosen: Offer | None) -> str | None:
    """What to say when a restore named a replica and the job's nodes held no snapshot of a whole
    state (every shard of a step, for a sharded one), else None: the job went back to a checkpoint,
    or to step 0, and lost every step since."""
    if source.kind != REPLICA or (chosen is not None and chosen.kind == REPLICA):
        return None
    used = ("started fresh at step 0" if chosen is None
            else f"restored step {chosen.step} from the checkpoint {chosen.path}")
    return f"no whole replica snapshot on the job's nodes: {used}; the steps after it are lost"


def shapes(state: dict[str, Any]) -> resume.Shapes:
    """A whole model's state dict as `resume.mismatch` compares it: name -> shape."""
    return {name: tuple(value.shape) for name, value in state.items() if hasattr(value, "shape")}


def restore_state(env: WorkerEnv, model: Any, optimizer: Any, device: Any = None) -> tuple[int, Offer | None]:
    """Load the chosen state into `model` and `optimizer` on every rank; returns (step, source).
    Raises ResumeRefused when the job asked to resume and there is nothing to resume from, or the
    checkpoint is of another model or world size."""
    import torch.distributed as dist

    if env.restore.kind == "none":
        return 0, None
    gathered: list[list[Offer] | None] = [None] * env.world_size
    dist.all_gather_object(gathered, local_offers(env))
    chosen = choose([offer for offers in gathered for offer in offers or []])
    if chosen is None:
        if env.resume:
            resume.location(env)  # raises when that is why (`latest` found none)
            raise resume.ResumeRefused(f"resume from {env.resume}: no checkpoint this job can read there "
                                       "(the ranks' logs say why); not resumed")
        log.warning("restore %s: no rank has a snapshot or checkpoint; starting fresh", env.restore.kind)
        return 0, None
    mine = env.rank == chosen.rank
    box: list[dict[str, Any] | None] = [state_files.load(Path(chosen.path)) if mine else None]
    dist.broadcast_object_list(box, src=chosen.rank, device=device)
    payload = box[0]
    if chosen.resumed and (why := resume.mismatch(shapes(payload["model"]), shapes(model.state_dict()),
                                                  payload.get("world_size"), env.world_size)):
        raise resume.refuse(chosen.path, why)
    model.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    return int(payload["step"]), chosen
