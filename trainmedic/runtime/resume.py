"""Resuming a submission from a checkpoint another one wrote: only when its job spec asks (`resume`), and
only onto the same model and world size; a submission never restores another's state on its own
(docs/executor.md, "Submissions, and resuming one").
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from trainmedic.runtime import state_files
from trainmedic.runtime.env import WorkerEnv
from trainmedic.schemas.jobs import LATEST, SUBMISSION_NAME

Shapes = Mapping[str, tuple[int, ...]]  # a model's tensors: name -> shape
WORLD_FILE = "trainmedic.json"  # in a DCP checkpoint's directory: the world size and step that wrote it


class ResumeRefused(RuntimeError):
    """The checkpoint a submission asked to resume from is not there, or is of another model or
    world size: the rank ends with this error rather than train on the wrong state."""


def location(env: WorkerEnv) -> Path:
    """Where `env.resume` points: a checkpoint, or a directory of them; for `latest`, the directory
    of the newest earlier submission of this job that holds a whole checkpoint, beside this
    submission's own (CHECKPOINT_DIR/JOB/SUBMISSION; submissions are named by when they were
    submitted). Raises ResumeRefused when `latest` finds none."""
    if env.resume != LATEST:
        return Path(env.resume)
    if not env.checkpoint_dir:
        raise ResumeRefused("resume: latest needs the job's checkpoint_dir, where earlier submissions "
                            "wrote their checkpoints")
    own = Path(env.checkpoint_dir)
    earlier = sorted((p for p in own.parent.glob("*") if SUBMISSION_NAME.fullmatch(p.name)
                      and p.name < own.name and p.is_dir()), reverse=True)
    found = next((p for p in earlier if state_files.holds_checkpoint(p)), None)
    if found is None:
        raise ResumeRefused(f"resume: latest: no earlier submission of job {env.job} wrote a checkpoint "
                            f"in {own.parent}; not resumed (drop `resume` to start at step 0)")
    return found


def mismatch(saved: Shapes, live: Shapes, saved_world: int | None, world: int) -> str | None:
    """Why a checkpoint of model `saved` written at `saved_world` ranks is not this job's (model
    `live` at `world` ranks), in words; None when it is."""
    if saved_world is None:
        return "it does not say which world size wrote it (written before trainmedic recorded that)"
    if saved_world != world:
        return f"it was written by {saved_world} ranks and this job runs {world}"
    missing, extra = sorted(set(live) - set(saved)), sorted(set(saved) - set(live))
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"{missing[0]} is not in it ({len(missing)} of this model's tensors are not)")
        if extra:
            parts.append(f"it holds {extra[0]}, which this model lacks ({len(extra)} such)")
        return "another model: " + "; ".join(parts)
    differ = sorted(name for name in live if tuple(live[name]) != tuple(saved[name]))
    if differ:
        name = differ[0]
        return (f"another model: {name} is {tuple(saved[name])} there and {tuple(live[name])} here "
                f"({len(differ)} of {len(live)} tensors differ in shape)")
    return None


def refuse(path: str, why: str) -> ResumeRefused:
    return ResumeRefused(f"resume from {path}: {why}; not resumed: submit it with the model and world "
                         "size that wrote the checkpoint, or without `resume` to start at step 0")
