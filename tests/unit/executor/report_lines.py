"""The rank the report tests speak as, and a report of it as the rank writes it on its socket."""

from __future__ import annotations

import json

from trainmedic.recovery.executor.core.reports import LaunchedRank

RANK = LaunchedRank("llm", 3, 1, 4, local_rank=1, hang_floor_s=120.0)


def line(**fields) -> bytes:
    event = {"type": "worker_step", "ts": 5.0e9, "node": "n1", "job": "llm", "rank": 1, "world_size": 4,
             "generation": 3, "pid": 1, "step": 10, "step_time": 0.1, **fields}
    return json.dumps(event).encode()
