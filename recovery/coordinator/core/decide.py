"""Decisions: what the coordinator emits in answer to one event (a new job, an incident by its
severity, an ack, ranks finished, an operator's stop); pure, the state already folded and not changed
(docs/coordinator.md, "Decisions").
"""

from __future__ import annotations

from trainmedic.recovery.coordinator.core.blame import blames_node, cannot_run, signature
from trainmedic.recovery.coordinator.core.commands import (
    commands_for,
    digest,
    escalation_id,
    first_start,
    incident_plan_id,
    replica,
    start_plan_id,
    stop_plan_id,
)
from trainmedic.recovery.coordinator.core.health import on_check_answer, suspect
from trainmedic.recovery.coordinator.core.isolation import decide_isolations, node_group, skip
from trainmedic.recovery.coordinator.core.lifecycle import new_work_refused, suspects
from trainmedic.recovery.coordinator.core.limits import give_up_reason, restart_due
from trainmedic.recovery.coordinator.core.state import (
    ClusterState,
    CommandRecord,
    CommandStatus,
    Job,
    JobState,
)
from trainmedic.schemas.commands import CommandAcked, CommandAction, RanksFinished
from trainmedic.schemas.incident import Action, Incident, IncidentStatus, Severity
from trainmedic.schemas.jobs import JobStopRequested, JobSubmitted
from trainmedic.schemas.recovery import (
    JobEnded,
    RecoveryCompleted,
    RecoveryFailed,
    RecoveryKind,
    RecoveryPlanned,
    RecoverySkipped,
)

# A command that fails escalates by what it was: a reattempt to a restart of the job, a
# start, restart or stop to isolating its node (a node that cannot run workers is bad).
ESCALATION = {
    CommandAction.REATTEMPT: (Severity.SEV2, Action.RESTART, "reattempt_failed"),
    CommandAction.RESTART: (Severity.SEV1, Action.RECONFIGURE, "restart_failed"),
    CommandAction.START: (Severity.SEV1, Action.RECONFIGURE, "start_failed"),
    CommandAction.STOP: (Severity.SEV1, Action.RECONFIGURE, "stop_failed"),
}


def decide(state: ClusterState, event: object, now: float) -> list:
    """The events to emit for `event` (already folded into `state`)."""
    match event:
        case JobSubmitted():
            return start_job(state, event.job.id, now)
        case Incident():
            return on_incident(state, event, now)
        case CommandAcked():
            return on_ack(state, event, now)
        case RanksFinished():
            return succeeded(state, event.job, now)
        case JobStopRequested():
            return stop_job(state, event.job, now)
    return []


def start_job(state: ClusterState, job_id: str, now: float) -> list:
    """A new job starts on the nodes its spec names, at generation 0, if they are free and healthy."""
    job = state.jobs.get(job_id)
    if (job is None or job.state is not JobState.SUBMITTED or job.plan is not None or job.not_started
            or job.over):
        return []
    held = suspects(state)  # once, not per node: a job may name thousands
    problems = [why for n in job.spec.nodes if (why := new_work_refused(state, n, held)) is not None]
    running = {node: other for other in state.jobs.values() for node in other.nodes}
    problems += [f"node {n} runs job {running[n].spec.id}" for n in job.spec.nodes if n in running]
    if not job.spec.nodes:
        problems.append("its spec names no nodes")
    if problems:
        reason = "not started: " + "; ".join(problems) + " (it waits for a re-plan)"
        return [RecoverySkipped(ts=now, job=job_id, reason=reason)]
    source = first_start(job.spec)
    plan = RecoveryPlanned(ts=now, plan_id=start_plan_id(job_id), job=job_id, kind=RecoveryKind.START,
                           generation=0, nodes=job.spec.nodes, restore=dict.fromkeys(job.spec.nodes, source))
    return [plan, *commands_for(state, plan, now)]


def succeeded(state: ClusterState, job_id: str, now: float) -> list:
    """`job_ended` (succeeded) once every node the job runs on said its ranks of the job's current
    generation exited 0; reports of an older generation (a plan moved the job since) do not count."""
    job = state.jobs.get(job_id)
    if job is None or job.state.ended or not job.nodes or job.generation is None:
        return []
    if any((job.generation, node) not in job.finished for node in job.nodes):
        return []
    return [JobEnded(ts=now, job=job_id, state="succeeded", generation=job.generation,
                     reason=f"every rank of generation {job.generation} exited 0 on "
                            f"{len(job.nodes)} node(s)")]


def stop_job(state: ClusterState, job_id: str, now: float) -> list:
    """An operator stopped the job: a stop plan (a stop command to each of its nodes) whose completion
    ends it (`completion`), or `job_ended` at once when no node runs it."""
    job = state.jobs.get(job_id)
    if job is None or job.stop is None or job.state.ended or job.state is JobState.STOPPING:
        return []  # STOPPING: its stops are out already, and their completion ends it
    if not job.nodes:
        return [_stopped(job, now, "no node ran it")]
    plan = RecoveryPlanned(ts=now, plan_id=stop_plan_id(job_id), job=job_id, kind=RecoveryKind.STOP,
                           generation=job.generation + 1, nodes=(), previous=job.nodes, isolated={})
    return [plan, *commands_for(state, plan, now)]


def _stopped(job: Job, now: float, how: str) -> JobEnded:
    """`job_ended` (stopped) for the operator's stop, and `how` it went."""
    why = f"stopped by {job.stop.by}" + (f": {job.stop.reason}" if job.stop.reason else "")
    return JobEnded(ts=now, job=job.spec.id, state="stopped", generation=job.generation,
                    reason=f"{why} ({how})")


def on_incident(state: ClusterState, incident: Incident, now: float) -> list:
    """SEV3 reattempts; a SEV1 that blames its node isolates it (grouped and capped,
    `isolation.py`); a SEV2, or a SEV1 that follows the job, restarts the job, backing off
    between restarts and giving up at the limit; such a SEV1 where another job failed too makes
    its node suspect and sends it a health check (`health.py`). An incident not yet due waits (no
    output): `tick` decides it when it is. WARN and `alert` incidents are for the alert sinks."""
    if incident.id not in state.pending:
        return []  # decided already, resolved, or not the coordinator's to act on
    if incident.node is not None and not state.in_cluster(incident.node):
        return [skip(incident, now, f"node {incident.node} is not in the cluster: nothing isolated or "
                                    "restarted")]
    held: list = []
    if incident.severity is Severity.SEV1:
        if incident.node is None:
            return [skip(incident, now, "a SEV1 incident that names no node: nothing to isolate")]
        if blames_node(state, incident):
            return decide_isolations(state, now)
        held = suspect(state, incident, now)  # a job's failure: the node is checked, the job answered
    return held + _for_the_job(state, incident, now)


def _for_the_job(state: ClusterState, incident: Incident, now: float) -> list:
    job = _job_of(state, incident)
    if job is None:
        where = f"job {incident.job}" if incident.job else f"node {incident.node}"
        return [skip(incident, now, f"no running job known for {where}")]
    if job.over:
        what = f"ended ({job.state})" if job.closed else "being stopped by an operator"
        return [skip(incident, now, f"job {job.spec.id} is {what}: nothing to restart", job.spec.id)]
    if incident.severity is Severity.SEV3:
        return _reattempt(state, incident, job, now)
    return _restart_limited(state, incident, job, now)


def _job_of(state: ClusterState, incident: Incident) -> Job | None:
    if incident.job is not None:
        return state.jobs.get(incident.job)
    return state.job_on(incident.node) if incident.node else None


def _reattempt(state: ClusterState, incident: Incident, job: Job, now: float) -> list:
    if job.state is not JobState.RUNNING:
        return [skip(incident, now, f"job {job.spec.id} is {job.state}: a reattempt would not help",
                     job.spec.id)]
    plan = RecoveryPlanned(ts=now, plan_id=incident_plan_id(incident.id), incident_id=incident.id,
                           job=job.spec.id, kind=RecoveryKind.REATTEMPT, generation=job.generation,
                           nodes=job.nodes, previous=job.nodes, isolated={})
    return [plan, *commands_for(state, plan, now)]


def _restart_limited(state: ClusterState, incident: Incident, job: Job, now: float) -> list:
    """The job is blamed: restart it unless a restart was just planned, the backoff has not run
    out, or the restarts are spent. Other incidents of the job waiting now are answered with it."""
    name, plan = job.spec.id, job.plan
    moving = plan is not None and plan.kind in (RecoveryKind.RESTART, RecoveryKind.RECONFIGURE)
    # Within the group window, or the tick after it: a SEV2 that waited for its job's node group is
    # answered at the first tick after that group's re-plan, which may be `tick_s` later.
    together_s = max(state.config.group_window_s, state.config.tick_s)
    if job.state.in_flight and moving and now - plan.ts <= together_s:
        return [skip(incident, now, f"planned together with plan {plan.plan_id} ({plan.kind} of {name} "
                                    f"{now - plan.ts:g} s ago)", name)]
    if not job.nodes:
        return [skip(incident, now, f"job {name} is {job.state} and runs on no node", name)]
    if any(waiting.node in job.nodes for waiting in node_group(state)):
        return []  # a node fault of the job waits for its group: that re-plan restarts the job too
    failure = signature(incident)
    spent = give_up_reason(state, job, failure, now)
    if spent is not None or gave_up_id(job) in state.incidents:
        return _give_up(state, incident, job, now, spent or "")
    if restart_due(state, job, failure, now) > now:
        return []  # backing off: tick decides it when the wait is over
    out = _restart(state, incident, job, now)
    together = sorted((state.incidents[i] for i in state.pending if i != incident.id),
                      key=lambda i: (i.ts, i.id))
    out += [skip(other, now, f"planned together with incident {incident.id} (restart of {name})", name)
            for other in together if other.severity is not Severity.SEV3 and _job_of(state, other) is job
            and not (other.severity is Severity.SEV1 and blames_node(state, other))]
    return out


def _give_up(state: ClusterState, incident: Incident, job: Job, now: float, spent: str) -> list:
    """Restarts spent (`spent` says why): `recovery_failed`, an alert for a person, a stop of its
    ranks (best effort) and `job_ended` (failed), once: its nodes are free; later incidents are skipped."""
    name = job.spec.id
    spent = spent or f"the coordinator gave up on job {name} at generation {job.generation}"
    alert_id = gave_up_id(job)
    out: list = [skip(incident, now, spent, name)]
    if alert_id in state.incidents:
        return out
    if job.plan is not None:
        out.append(RecoveryFailed(ts=now, plan_id=job.plan.plan_id, job=name, generation=job.generation,
                                  reason=spent, escalation=alert_id))
    out.append(Incident(ts=now, id=alert_id, status=IncidentStatus.OPEN, category="recovery_failed",
                        severity=Severity.SEV1, action=Action.ALERT, job=name, first_ts=incident.first_ts,
                        evidence=(spent, f"last: {incident.severity} {incident.category} ({incident.id})")))
    stop = RecoveryPlanned(ts=now, plan_id=stop_plan_id(name), job=name, kind=RecoveryKind.STOP,
                           generation=job.generation + 1, nodes=(), previous=job.nodes, isolated={})
    return [*out, stop, *commands_for(state, stop, now),
            JobEnded(ts=now, job=name, state="failed", generation=job.generation, reason=spent)]


def gave_up_id(job: Job) -> str:
    """The alert raised when the coordinator gave up on the job at its generation."""
    return f"esc-{digest('gave_up', job.spec.id, job.generation)}"


def _restart(state: ClusterState, incident: Incident, job: Job, now: float) -> list:
    """Every node restarts at generation + 1 from the newest snapshot any of them holds (a process
    fault leaves every node's disk): the failed ones prefer a survivor's on a tie, the others their
    own; with no survivor, any node's (the checkpoint when no snapshot is whole)."""
    spec, nodes = job.spec, job.nodes
    failed = {incident.node} | {nodes[r // spec.ranks_per_node] for r in incident.ranks
                                if r // spec.ranks_per_node < len(nodes)}
    survivors = [node for node in nodes if node not in failed]
    restore = {node: replica(survivors[0] if survivors else None) for node in nodes if node in failed}
    plan = RecoveryPlanned(ts=now, plan_id=incident_plan_id(incident.id), incident_id=incident.id,
                           job=spec.id, kind=RecoveryKind.RESTART, generation=job.generation + 1,
                           nodes=nodes, previous=nodes, restore=restore, isolated={})
    return [plan, *commands_for(state, plan, now)]


def on_ack(state: ClusterState, ack: CommandAcked, now: float) -> list:
    record = state.commands.get(ack.command_id)
    if record is not None and record.command.action is CommandAction.HEALTH_CHECK:
        return on_check_answer(state, record, now)
    job = state.jobs.get(record.command.job) if record else None
    if record is None or job is None or not job.state.in_flight or record.command.id not in job.steps:
        return []
    if record.status in (CommandStatus.FAILED, CommandStatus.REFUSED) and state.awaited(record.command.node):
        return fail_plan(state, job, [record], now)
    return completion(state, job, now)


def completion(state: ClusterState, job: Job, now: float) -> list:
    """`recovery_completed` once every command to a healthy node not leaving is done; for a job an
    operator stopped, once no node runs it, `job_ended` (stopped) instead. Only the steps not done
    are read (the fold keeps them), so checking after every ack stays cheap on a 2,048-node job."""
    if any(state.awaited(job.steps[cid].node) for cid in job.outstanding):
        return []
    if job.stop is not None and not job.plan.nodes:
        return [_stopped(job, now, f"its ranks stopped on {len(job.plan.previous)} node(s)")]
    return [RecoveryCompleted(ts=now, plan_id=job.plan.plan_id, job=job.spec.id, generation=job.generation)]


def fail_plan(state: ClusterState, job: Job, records: list[CommandRecord], now: float) -> list:
    """The plan failed; each failed command escalates, except refusals (not the node's fault). A
    command that cannot run, or one error on several nodes, blames the job (SEV2, no node);
    otherwise a start, restart or stop that failed blames its node (SEV1)."""
    reasons: dict[str | None, set[str]] = {}
    for record in records:
        if record.status is CommandStatus.FAILED:
            reasons.setdefault(record.reason, set()).add(record.command.node)
    incidents = []
    for record in records:
        if record.status is CommandStatus.REFUSED:
            continue
        command = record.command
        severity, action, category = ESCALATION[command.action]
        node, why = command.node, describe(record, state.config.max_retries)
        if command.action is not CommandAction.STOP and record.status is CommandStatus.FAILED and (
                cannot_run(record.reason) or len(reasons[record.reason]) > 1):
            severity, action, node = Severity.SEV2, Action.RESTART, None
            why += (" — the job's command cannot run: a job error, not the node's"
                    if cannot_run(record.reason)
                    else f" — the same error on {len(reasons[record.reason])} nodes: the job's, not a node's")
        incidents.append(Incident(
            ts=now, id=escalation_id(command.id), status=IncidentStatus.OPEN, category=category,
            severity=severity, action=action, job=command.job, node=node,
            ranks=command.worker.ranks if command.worker and node else (), first_ts=now,
            evidence=(f"{command.action} of generation {command.generation} on {command.node}: {why}",),
        ))
    first = records[0]
    if job.stop is not None and not job.plan.nodes:  # the job ends anyway; its node's failure escalates
        why = f"{first.command.action} on {first.command.node}: {describe(first, state.config.max_retries)}"
        return [_stopped(job, now, why), *incidents]
    failed = RecoveryFailed(
        ts=now, plan_id=job.plan.plan_id, job=job.spec.id, generation=job.generation,
        reason=f"{first.command.action} on {first.command.node}: {describe(first, state.config.max_retries)}",
        command_id=first.command.id, node=first.command.node,
        escalation=incidents[0].id if incidents else None,
    )
    return [failed, *incidents]


def describe(record: CommandRecord, max_retries: int) -> str:
    """Why a command did not complete, in words."""
    if record.status in (CommandStatus.FAILED, CommandStatus.REFUSED):
        return f"{record.status}" + (f" ({record.reason})" if record.reason else "")
    if record.status is CommandStatus.ACCEPTED:
        return "accepted but not done in time"
    return f"no answer after {len(record.sent)} sends"
