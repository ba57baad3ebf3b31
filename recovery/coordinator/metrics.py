"""The coordinator's metrics (docs/metrics.md); `observe.py` updates them from outside the core."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

_ACKED_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600)

RECOVERY_PLANS = Counter("trainmedic_recovery_plans", "Plans the coordinator issued, one per job", ["kind"])
RECOVERY_OUTCOMES = Counter("trainmedic_recovery_outcomes", "Plans that completed or failed, and incidents "
                            "the coordinator skipped", ["outcome"])
COMMANDS_SENT = Counter("trainmedic_commands_sent", "Commands sent, re-sends included", ["action"])
UNVERIFIED = Counter("trainmedic_coordinator_unverified_records", "Records not signed by who may write "
                     "them (commands: this coordinator; jobs and node events: an operator; acks: their "
                     "node): dead-lettered, never folded", ["type", "reason"])
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
NODES = Gauge("trainmedic_nodes", "Nodes the coordinator knows, healthy or isolated", ["state"])
JOBS = Gauge("trainmedic_jobs", "Jobs the coordinator knows, by state", ["state"])
