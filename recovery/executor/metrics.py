"""The executor's metrics (docs/metrics.md)."""

from __future__ import annotations

from prometheus_client import Counter

from trainmedic.bus.metrics import RECOVERY_PHASE
from trainmedic.schemas.commands import AckStatus

EXECUTOR_ACKS = Counter("trainmedic_executor_acks", "Answers an executor sent, by status", ["status"])
SEND_FAILURES = Counter("trainmedic_executor_send_failures",
                        "Acks, rank exits and dead letters the executor could not deliver (logged)")
POISON = Counter("trainmedic_executor_poison_commands",
                 "Commands that raised while being decided or applied: dead-lettered and read past")
RANK_EXITS = Counter("trainmedic_rank_exits", "Rank processes that ended: clean (exit 0), failed, or unknown",
                     ["outcome"])
ADMISSION_REFUSALS = Counter("trainmedic_executor_admission_refusals",
                             "Commands refused before anything started: their argv or paths break the "
                             "admission policy, by the rule broken", ["rule"])
UNVERIFIED = Counter("trainmedic_executor_unverified_commands",
                     "Commands refused because their signature did not verify with a trusted key")
RANK_REPORTS = Counter("trainmedic_executor_rank_reports",
                       "What ranks reported over the executor's socket: published on telemetry.worker, "
                       "or refused and why (another job, node, generation or rank; a step backwards or "
                       "leaping ahead; over the rate; malformed; oversized; not a rank's process; too many "
                       "connections)",
                       ["outcome"])
RANKS_KEPT = Counter("trainmedic_executor_ranks_kept", "Ranks a restart kept in their own process: waiting "
                    "after a peer's failure (`Runtime.run`), re-formed at the next generation, not started "
                    "again")
PHASES = ("stop", "launch", "rendezvous", "restore", "first_step")  # of RECOVERY_PHASE (bus/metrics.py)

# Every known label value from the start at 0: a panel shows "none" rather than no data, and the
# first event counts as an increase (a series born at 1 has no rate).
for _status in AckStatus:
    EXECUTOR_ACKS.labels(str(_status))
for _outcome in ("clean", "failed", "unknown"):
    RANK_EXITS.labels(_outcome)
for _outcome in ("published", "rate", "malformed", "oversized", "other_job", "other_node", "other_generation",
                 "other_rank", "other_world_size", "step_backwards", "step_leap", "unknown_process",
                 "connections"):
    RANK_REPORTS.labels(_outcome)
for _phase in PHASES:
    RECOVERY_PHASE.labels(_phase)
