"""What the coordinator tells Prometheus: plans, commands, acks, outcomes, the time until a plan's
commands were acknowledged, and the cluster's health. Reads the state and the events; changes nothing."""

from __future__ import annotations

from collections import Counter

from trainmedic.recovery.coordinator import metrics
from trainmedic.recovery.coordinator.core.limits import isolations_left
from trainmedic.recovery.coordinator.core.state import ClusterState, JobState, NodeMode
from trainmedic.schemas.commands import Command, CommandAcked
from trainmedic.schemas.recovery import (
    RecoveryCompleted,
    RecoveryFailed,
    RecoveryKind,
    RecoveryPlanned,
    RecoverySkipped,
)


def received(event: object) -> None:
    if isinstance(event, CommandAcked):
        metrics.COMMAND_ACKS.labels(str(event.status)).inc()


def published(state: ClusterState, outputs: list) -> None:
    """Count what a decision emitted; a completed plan that answered an incident and placed its job on
    nodes gives the time from the incident's first evidence to its commands acknowledged (a plan that
    took every node resumed nothing: its job is queued)."""
    for event in outputs:
        match event:
            case RecoveryPlanned():
                metrics.RECOVERY_PLANS.labels(str(event.kind)).inc()
                incident = state.incidents.get(event.incident_id) if event.incident_id else None
                if incident is not None and event.kind is not RecoveryKind.REATTEMPT:
                    metrics.RECOVERY_PHASE.labels("detect").observe(max(0.0, incident.ts - incident.first_ts))
                    metrics.RECOVERY_PHASE.labels("plan").observe(max(0.0, event.ts - incident.ts))
            case Command():
                metrics.COMMANDS_SENT.labels(str(event.action)).inc()
            case RecoverySkipped():
                metrics.RECOVERY_OUTCOMES.labels("skipped").inc()
            case RecoveryFailed():
                metrics.RECOVERY_OUTCOMES.labels("failed").inc()
            case RecoveryCompleted():
                metrics.RECOVERY_OUTCOMES.labels("completed").inc()
                job = state.jobs.get(event.job)
                plan = job.plan if job else None
                incident = state.incidents.get(plan.incident_id) if plan and plan.incident_id else None
                if plan is not None and plan.plan_id == event.plan_id and incident is not None and plan.nodes:
                    acked_s = max(0.0, event.ts - incident.first_ts)
                    metrics.RECOVERY_ACKED.labels(str(plan.kind)).observe(acked_s)
                    if plan.kind is not RecoveryKind.REATTEMPT:
                        metrics.RECOVERY_PHASE.labels("commands").observe(max(0.0, event.ts - plan.ts))


def cluster(state: ClusterState, now: float) -> None:
    """Nodes healthy and isolated (and of the healthy, cordoned and draining), jobs by state, and the
    isolations the cap still allows."""
    metrics.ISOLATIONS_LEFT.set(isolations_left(state, now))
    isolated = sum(not node.healthy for node in state.nodes.values())
    metrics.NODES.labels("healthy").set(len(state.nodes) - isolated)
    metrics.NODES.labels("isolated").set(isolated)
    modes = Counter(node.mode for node in state.nodes.values() if node.healthy)
    for mode in (NodeMode.CORDONED, NodeMode.DRAINING):
        metrics.NODES.labels(str(mode)).set(modes[mode])
    jobs = Counter(job.state for job in state.jobs.values())
    for job_state in JobState:
        metrics.JOBS.labels(str(job_state)).set(jobs[job_state])
