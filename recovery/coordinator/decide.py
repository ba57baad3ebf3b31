"""Decisions: what the coordinator emits in answer to one event. Pure; the state is not changed.

`decide` sees the state with the event already folded in. It answers a new job with its
start, an open incident by its severity (TAXONOMY.md), and an ack with the plan's outcome.
"""

from __future__ import annotations

from recovery.coordinator.commands import (
    checkpoint,
    commands_for,
    escalation_id,
    incident_plan_id,
    replica,
    start_plan_id,
)
from recovery.coordinator.planning import plan_request
from recovery.coordinator.state import ClusterState, CommandRecord, CommandStatus, Job, JobState
from schemas.commands import CommandAcked, CommandAction
from schemas.incident import Action, Incident, IncidentStatus, Severity
from schemas.jobs import JobSubmitted
from schemas.recovery import (
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
    return []


def start_job(state: ClusterState, job_id: str, now: float) -> list:
    """A new job starts on the nodes its spec names, at generation 0, if they are free and healthy."""
    job = state.jobs.get(job_id)
    if job is None or job.state is not JobState.SUBMITTED or job.plan is not None or job.not_started:
        return []
    problems = [f"node {n} is isolated" for n in job.spec.nodes if not state.healthy(n)]
    problems += [f"node {n} runs job {other.spec.id}" for n in job.spec.nodes
                 if (other := state.job_on(n)) is not None]
    if not job.spec.nodes:
        problems.append("its spec names no nodes")
    if problems:
        reason = "not started: " + "; ".join(problems) + " (it waits for a re-plan)"
        return [RecoverySkipped(ts=now, job=job_id, reason=reason)]
    source = checkpoint(job.spec)
    plan = RecoveryPlanned(ts=now, plan_id=start_plan_id(job_id), job=job_id, kind=RecoveryKind.START,
                           generation=0, nodes=job.spec.nodes, restore=dict.fromkeys(job.spec.nodes, source))
    return [plan, *commands_for(state, plan, now)]


def on_incident(state: ClusterState, incident: Incident, now: float) -> list:
    """SEV3 reattempts, SEV2 restarts in place, SEV1 isolates and re-plans; WARN is for the alert sinks."""
    if (incident.status is not IncidentStatus.OPEN or incident.severity is Severity.WARN
            or incident.id in state.handled):
        return []
    if incident.severity is Severity.SEV1:
        return _reconfigure(state, incident, now)
    if incident.job is not None:
        jobs = [state.jobs[incident.job]] if incident.job in state.jobs else []
    else:
        jobs = [job] if incident.node and (job := state.job_on(incident.node)) else []
    if not jobs:
        where = f"job {incident.job}" if incident.job else f"node {incident.node}"
        return [_skip(incident, now, f"no running job known for {where}")]
    plan = _reattempt if incident.severity is Severity.SEV3 else _restart
    return [out for job in jobs for out in plan(state, incident, job, now)]


def _skip(incident: Incident, now: float, reason: str, job: str | None = None) -> RecoverySkipped:
    return RecoverySkipped(ts=now, incident_id=incident.id, job=job or incident.job, node=incident.node,
                           reason=reason)


def _reattempt(state: ClusterState, incident: Incident, job: Job, now: float) -> list:
    if job.state is not JobState.RUNNING:
        return [_skip(incident, now, f"job {job.spec.id} is {job.state}: a reattempt would not help",
                      job.spec.id)]
    plan = RecoveryPlanned(ts=now, plan_id=incident_plan_id(incident.id), incident_id=incident.id,
                           job=job.spec.id, kind=RecoveryKind.REATTEMPT, generation=job.generation,
                           nodes=job.nodes, previous=job.nodes)
    return [plan, *commands_for(state, plan, now)]


def _restart(state: ClusterState, incident: Incident, job: Job, now: float) -> list:
    """Every node restarts at generation + 1; the failed ones restore from a survivor, else all
    from the checkpoint."""
    if not job.nodes:
        return [_skip(incident, now, f"job {job.spec.id} is {job.state} and runs on no node",
                      job.spec.id)]
    spec, nodes = job.spec, job.nodes
    failed = {incident.node} | {nodes[r // spec.ranks_per_node] for r in incident.ranks
                                if r // spec.ranks_per_node < len(nodes)}
    survivors = [node for node in nodes if node not in failed]
    if survivors:
        restore = {node: replica(spec, nodes, survivors[0]) for node in nodes if node in failed}
    else:
        restore = dict.fromkeys(nodes, checkpoint(spec))
    plan = RecoveryPlanned(ts=now, plan_id=incident_plan_id(incident.id), incident_id=incident.id,
                           job=spec.id, kind=RecoveryKind.RESTART, generation=job.generation + 1,
                           nodes=nodes, previous=nodes, restore=restore)
    return [plan, *commands_for(state, plan, now)]


def _reconfigure(state: ClusterState, incident: Incident, now: float) -> list:
    """The node is already isolated (the fold did it); every job whose nodes change gets a plan."""
    from recovery.planner.plan import plan as solve

    if incident.node is None:
        return [_skip(incident, now, "a SEV1 incident that names no node: nothing to isolate")]
    request = plan_request(state, now)
    result = solve(request)
    out: list = []
    for job in state.jobs.values():
        nodes = result.allocations.get(job.spec.id, ())
        if nodes == job.nodes:
            continue
        restore = {}
        for node in nodes:
            source = result.restore.get(node)
            if source is not None:
                restore[node] = (replica(job.spec, job.nodes, source.node) if source.kind == "replica"
                                 else checkpoint(job.spec))
        plan = RecoveryPlanned(
            ts=now, plan_id=incident_plan_id(incident.id), incident_id=incident.id, job=job.spec.id,
            kind=RecoveryKind.RECONFIGURE, generation=0 if job.generation is None else job.generation + 1,
            nodes=nodes, previous=job.nodes, restore=restore, horizon_s=request.horizon_s,
        )
        out += [plan, *commands_for(state, plan, now)]
    if not out:
        return [_skip(incident, now, f"node {incident.node} isolated; no job needed new nodes")]
    return out


def on_ack(state: ClusterState, ack: CommandAcked, now: float) -> list:
    record = state.commands.get(ack.command_id)
    job = state.jobs.get(record.command.job) if record else None
    if record is None or job is None or not job.state.in_flight or record.command.id not in job.steps:
        return []
    if record.status in (CommandStatus.FAILED, CommandStatus.REFUSED) and state.healthy(record.command.node):
        return fail_plan(state, job, [record], now)
    return completion(state, job, now)


def completion(state: ClusterState, job: Job, now: float) -> list:
    """`recovery_completed` once every command to a healthy node is done."""
    for cid, step in job.steps.items():
        record = state.commands.get(cid)
        if state.healthy(step.node) and (record is None or record.status is not CommandStatus.DONE):
            return []
    return [RecoveryCompleted(ts=now, plan_id=job.plan.plan_id, job=job.spec.id, generation=job.generation)]


def fail_plan(state: ClusterState, job: Job, records: list[CommandRecord], now: float) -> list:
    """The plan failed; each failed command escalates its node, except refusals (not the node's fault)."""
    incidents = []
    for record in records:
        if record.status is CommandStatus.REFUSED:
            continue
        command = record.command
        severity, action, category = ESCALATION[command.action]
        incidents.append(Incident(
            ts=now, id=escalation_id(command.id), status=IncidentStatus.OPEN, category=category,
            severity=severity, action=action, job=command.job, node=command.node,
            ranks=command.worker.ranks if command.worker else (), first_ts=now,
            evidence=(f"{command.action} of generation {command.generation} on {command.node}: "
                      f"{describe(record, state.config.max_retries)}",),
        ))
    first = records[0]
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
