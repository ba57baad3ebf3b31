"""The executor's metrics (docs/metrics.md)."""

from __future__ import annotations

from prometheus_client import Counter

EXECUTOR_ACKS = Counter("trainmedic_executor_acks", "Answers an executor sent, by status", ["status"])
RANK_EXITS = Counter("trainmedic_rank_exits", "Rank processes that ended, clean (exit 0) or not", ["outcome"])
