"""What a training script imports to join, restore, snapshot and retry (docs/adopting.md has the dozen
lines). Importing this module does not import torch: `init_from_env` and `Runtime` are imported on first use.
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
