"""What a training script imports to join, restore, snapshot and retry (docs/adopting.md).

    from trainmedic.runtime import Hook, init_from_env
    rt = init_from_env(hook=Hook.from_env())  # timeout: the job's failure.collective_timeout_s, else 60 s
    start = rt.restore(model, optimizer)
    for step in range(start, total):
        ...one step, up to its collective...
        with rt.finishing_step():  # a SIGTERM here waits for the snapshot
            rt.maybe_checkpoint(step + 1, model, optimizer)

Importing this module does not import torch: `init_from_env` and `Runtime` are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainmedic.producers.hook import Hook
from trainmedic.recovery.worker.env import WorkerEnv

if TYPE_CHECKING:
    from trainmedic.recovery.worker.runtime import Runtime, init_from_env

__all__ = ["Hook", "Runtime", "WorkerEnv", "init_from_env"]


def __getattr__(name: str) -> Any:
    """`init_from_env` and `Runtime` are the runtime module's own (so `help()` shows their real
    signature and docs), imported on first use."""
    if name in ("init_from_env", "Runtime"):
        from trainmedic.recovery.worker import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
