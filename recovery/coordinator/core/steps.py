"""Deadlines, and the steps that fold decisions back in: `tick` (pure), and `settle`, `react`,
`catch_up`, which apply what they emit as they go (one decision must see the previous one) and
return it all for publishing in order (docs/coordinator.md).
"""

from __future__ import annotations

from trainmedic.recovery.coordinator.core.blame import blames_node
from trainmedic.recovery.coordinator.core.capacity import replan_capacity
from trainmedic.recovery.coordinator.core.commands import commands_for
from trainmedic.recovery.coordinator.core.decide import (
    completion,
    decide,
    fail_plan,
    on_incident,
    start_job,
    stop_job,
    succeeded,
)
from trainmedic.recovery.coordinator.core.fold import apply
from trainmedic.recovery.coordinator.core.health import checks_due
from trainmedic.recovery.coordinator.core.readmission import readmissions
from trainmedic.recovery.coordinator.core.state import (
    ClusterState,
    CommandRecord,
    CommandStatus,
    Job,
    JobState,
)
from trainmedic.schemas.incident import Severity


def tick(state: ClusterState, now: float) -> list:
    """For every plan in flight: issue missing commands, re-send unanswered ones, fail it when a
    command failed or ran out of time, and complete it when all are done. Then decide the
    incidents whose wait is over (a group of SEV1s, a job's backoff), follow the suspect nodes'
    health checks (`health.checks_due`), re-admit the isolated nodes that earned it, and re-plan
    for nodes that left or came back once all is quiet."""
    out: list = []
    for job in state.jobs.values():
        if job.state.in_flight:
            out += _check(state, job, now)
    out += due(state, now) + checks_due(state, now)
    return out + readmissions(state, now) + replan_capacity(state, now)


def due(state: ClusterState, now: float) -> list:
    """Waiting incidents decided now: the node SEV1s as one group, and per job its oldest incident
    (which answers the job's others too), so one tick makes at most one plan per job."""
    out: list = []
    decided: set[str | None] = set()
    for incident in sorted((state.incidents[i] for i in state.pending), key=lambda i: (i.ts, i.id)):
        group = "node SEV1s" if incident.severity is Severity.SEV1 and blames_node(state, incident) else (
            incident.job or (job.spec.id if incident.node and (job := state.job_on(incident.node))
                             else incident.id))
        if group in decided:
            continue
        decided.add(group)
        out += on_incident(state, incident, now)
    return out


def _check(state: ClusterState, job: Job, now: float) -> list:
    config = state.config
    missing: set[str] = set()
    resend, failed = [], []
    for cid, step in job.steps.items():
        record = state.commands.get(cid)
        if record is None:
            missing.add(cid)  # the coordinator stopped between the plan and its commands
            continue
        if not state.awaited(step.node):
            continue  # best effort: an isolated or leaving node is neither retried nor escalated
        if record.status in (CommandStatus.FAILED, CommandStatus.REFUSED):
            failed.append(record)
        elif not record.status.terminal and now >= deadline(record, config.ack_timeout_s,
                                                            config.done_timeout_s):
            if record.status is CommandStatus.ISSUED and len(record.sent) <= config.max_retries:
                resend.append(record.command.model_copy(update={"ts": now}))
            else:
                failed.append(record)
    if failed:
        return fail_plan(state, job, failed, now)
    if missing:
        return commands_for(state, job.plan, now, only=missing)
    return resend or completion(state, job, now)


def deadline(record: CommandRecord, ack_timeout_s: float, done_timeout_s: float) -> float:
    """An unanswered command waits `ack_timeout_s` per send; an accepted one `done_timeout_s`."""
    if record.status is CommandStatus.ACCEPTED:
        return max(record.sent[-1], record.accepted_ts) + done_timeout_s
    return record.sent[-1] + ack_timeout_s


def settle(state: ClusterState, outputs: list, now: float) -> list:
    """Apply `outputs`; the coordinator's own incidents (escalations) are then decided on too."""
    for event in outputs:
        apply(state, event)
    settled = list(outputs)
    for event in outputs:
        if getattr(event, "type", None) == "incident":
            settled += settle(state, decide(state, event, now), now)
    return settled


def react(state: ClusterState, event: object, now: float, arrived: float | None = None) -> list:
    """One live event, received at `arrived` (the broker's time on a topic it stamps; else `now`): fold
    it, decide, fold the decisions. Returns what to publish."""
    apply(state, event, now if arrived is None else arrived)
    return settle(state, decide(state, event, now), now)


def catch_up(state: ClusterState, now: float) -> list:
    """After rebuilding from the log: end jobs whose ranks all finished, stop jobs an operator
    stopped, start jobs never started, decide incidents never decided, then tick (which issues
    commands a plan called for but the log lacks)."""
    out: list = []
    for job in list(state.jobs.values()):
        out += settle(state, succeeded(state, job.spec.id, now), now)
        out += settle(state, stop_job(state, job.spec.id, now), now)
        if job.state is JobState.SUBMITTED:
            out += settle(state, start_job(state, job.spec.id, now), now)
    for incident in sorted((state.incidents[i] for i in state.pending), key=lambda i: (i.ts, i.id)):
        out += settle(state, on_incident(state, incident, now), now)
    return out + settle(state, tick(state, now), now)
