"""What runs inside a rank, and the one import a training script needs to join, restore, snapshot and
retry (docs/adopting.md has the dozen lines). This package is the trust boundary: it is loaded into the
user's process, so it imports neither Kafka nor the executor (import-linter checks it), and it reaches
the executor only through the report socket and the environment the executor sets.

Importing it does not import torch: `init_from_env` and `Runtime` are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainmedic.runtime.env import WorkerEnv
from trainmedic.runtime.hook import Hook

if TYPE_CHECKING:
    from trainmedic.runtime.rank import Runtime, init_from_env

__all__ = ["Hook", "Runtime", "WorkerEnv", "init_from_env"]


def __getattr__(name: str) -> Any:
    """`init_from_env` and `Runtime` are rank.py's own (so `help()` shows their real
    signature and docs), imported on first use."""
    if name in ("init_from_env", "Runtime"):
        from trainmedic.runtime import rank

        return getattr(rank, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
