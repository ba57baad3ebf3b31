"""The coordinator's metrics (docs/metrics.md); `observe.py` updates them from outside the core."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from trainmedic.bus.metrics import RECOVERY_PHASE
from trainmedic.schemas.commands import AckStatus
from trainmedic.schemas.recovery import RecoveryKind

_ACKED_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600)

RECOVERY_PLANS = Counter("trainmedic_recovery_plans", "Plans the coordinator issued, one per job", ["kind"])
RECOVERY_OUTCOMES = Counter("trainmedic_recovery_outcomes", "Plans that completed or failed, and incidents "
                            "the coordinator skipped", ["outcome"])
COMMANDS_SENT = Counter("trainmedic_commands_sent", "Commands sent, re-sends included", ["action"])
UNVERIFIED = Counter("trainmedic_coordinator_unverified_records", "Records not signed by who may write "
                     "them, for this deployment (commands and decisions on recovery: this coordinator; "
                     "jobs and node events: an operator; acks: their node), and stale job submissions: "
                     "dead-lettered, never folded", ["type", "reason"])
MISPLACED_RECORDS = Counter("trainmedic_coordinator_misplaced_records", "Records read live from a topic that "
                            "does not carry their kind (a coordinator decision on incidents, a re-admission "
                            "on nodes): dead-lettered, never folded or acted on", ["topic"])
REJECTED = Counter("trainmedic_coordinator_rejected_records", "Valid, verified records the coordinator would "
                   "not apply (a job out of bounds, a node outside the cluster, a move the state forbids): "
                   "dead-lettered with the reason, nothing planned", ["type"])
COMMAND_ACKS = Counter("trainmedic_command_acks", "Acks the coordinator received, by status", ["status"])
# Not a time to resume: the coordinator reads no steps. The workers were started (or retried) when
# every command is done; their first step comes later (`trainmedic incidents show` tells it).
RECOVERY_ACKED = Histogram("trainmedic_recovery_acked_seconds",
                           "From an incident's earliest evidence to every command of the plan that placed "
                           "its job on nodes acknowledged done", ["kind"], buckets=_ACKED_BUCKETS)
PHASES = ("detect", "plan", "commands")  # of RECOVERY_PHASE (bus/metrics.py) the coordinator observes
NODES = Gauge("trainmedic_nodes", "Nodes the coordinator knows, healthy or isolated", ["state"])
JOBS = Gauge("trainmedic_jobs", "Jobs the coordinator knows, by state", ["state"])
# For alerting on the healer itself (compose/prometheus/rules.yml): a standby reports 0, so that no
# coordinator leading shows as a sum of 0 rather than as nothing.
LEADING = Gauge("trainmedic_coordinator_leading", "1 while this coordinator holds the lease and acts, else 0")
ISOLATIONS_LEFT = Gauge("trainmedic_isolations_left", "Nodes the coordinator may still isolate in the "
                        "current isolation window (0: the cap is reached, further node faults wait for a "
                        "person)")

# Children of every known label value exist from the start at 0: a panel shows "none" rather than no
# data, and the first event counts as an increase (a series born at 1 has no rate).
for _kind in RecoveryKind:
    RECOVERY_PLANS.labels(str(_kind))
    RECOVERY_ACKED.labels(str(_kind))
for _phase in PHASES:
    RECOVERY_PHASE.labels(_phase)
for _outcome in ("completed", "failed", "skipped"):
    RECOVERY_OUTCOMES.labels(_outcome)
for _status in AckStatus:
    COMMAND_ACKS.labels(str(_status))
