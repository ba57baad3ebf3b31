"""The fold: `state = apply(state, event)` over the jobs, incidents, recovery, commands, acks and nodes
topics, in place, idempotent and tolerant of how partitions interleave; fold the jobs topic first
(docs/coordinator.md, "The fold").
"""

from __future__ import annotations

import logging

from trainmedic.recovery.coordinator.core import health, lifecycle, limits, membership
from trainmedic.recovery.coordinator.core.commands import plan_steps
from trainmedic.recovery.coordinator.core.job_bounds import job_problems
from trainmedic.recovery.coordinator.core.state import (
    COMMAND_MOVES,
    JOB_MOVES,
    ClusterState,
    CommandRecord,
    CommandStatus,
    Job,
    JobState,
    Rejected,
    move,
)
from trainmedic.schemas.commands import (
    Command,
    CommandAcked,
    CommandAction,
    NodeJoined,
    NodeKeyRotated,
    NodeLeaving,
    NodeRegistered,
    RanksFinished,
)
from trainmedic.schemas.incident import Action, Incident, IncidentStatus, Severity
from trainmedic.schemas.jobs import JobStopRequested, JobSubmitted
from trainmedic.schemas.nodes import (
    NodeCordoned,
    NodeDrained,
    NodeEnrolled,
    NodeReadmitted,
    NodeRemoved,
    NodeUncordoned,
)
from trainmedic.schemas.recovery import (
    JobEnded,
    RecoveryCompleted,
    RecoveryFailed,
    RecoveryKind,
    RecoveryPlanned,
    RecoverySkipped,
)

log = logging.getLogger(__name__)

# An ack read before its command (another partition) waits for it: for at most this many
# commands, and this many acks each (accepted, done, and a few redelivered).
MAX_EARLY_ACKS = 10_000
MAX_ACKS_PER_COMMAND = 8
# An executor refuses commands further than its freshness window (60 s) from its clock, so an
# answer stamped earlier than that before the command's first send is not an answer to it.
ACK_SKEW_S = 60.0


def apply(state: ClusterState, event: object, arrived: float | None = None) -> ClusterState:
    """Fold one event into the state. Events of other types are ignored. `arrived`: when the
    coordinator received it (its own clock, or the broker's on a topic the broker stamps); None for
    its own decisions and on a rebuild, where an incident's `ts` stands in (`ClusterState.received`)."""
    match event:
        case JobSubmitted():
            _submitted(state, event)
        case JobStopRequested():
            _stop_requested(state, event)
        case Incident():
            _incident(state, _as_decided(event), arrived)
        case RecoveryPlanned():
            _planned(state, _as_decided(event))
        case RecoveryCompleted() | RecoveryFailed():
            _outcome(state, event)
        case RecoverySkipped():
            _skipped(state, event)
        case JobEnded():
            _ended(state, event)
        case Command():
            _command(state, event)
        case CommandAcked():
            heard(state, event.node, event.ts)
            _acked(state, event)
        case RanksFinished():
            heard(state, event.node, event.ts)
            _ranks_finished(state, event)
        case NodeCordoned() | NodeDrained() | NodeUncordoned() | NodeReadmitted():
            lifecycle.apply_node_event(state, event)
            health.returned(state, event.node)
        case NodeJoined() | NodeLeaving():
            heard(state, event.node, event.ts)
            lifecycle.apply_node_report(state, event)
            health.returned(state, event.node)
        case NodeEnrolled():
            membership.enrolled(state, event)
        case NodeRegistered():
            membership.registered(state, event)
        case NodeKeyRotated():
            membership.rotated(state, event)
        case NodeRemoved():
            membership.removed(state, event)
    return state


_SIGNING = ("signature", "key_id", "deployment")


def _as_decided(event: Incident | RecoveryPlanned) -> Incident | RecoveryPlanned:
    """An incident or plan the state keeps, without who signed it for which deployment: the
    coordinator folds its own decisions before it signs them, so one read back from the log must fold
    to the same state. (The coordinator's escalations carry these as extra fields of an incident.)"""
    if all(getattr(event, name, None) is None for name in _SIGNING):
        return event
    return type(event).model_validate(event.model_dump(exclude=set(_SIGNING)))


def _observed(state: ClusterState, ts: float) -> None:
    state.first_ts = ts if state.first_ts is None else min(state.first_ts, ts)


def _submitted(state: ClusterState, event: JobSubmitted) -> None:
    spec = event.job
    problems = job_problems(spec, state.in_cluster)
    if problems:
        raise Rejected(f"job {spec.id}: " + "; ".join(problems))
    _observed(state, event.ts)
    if spec.id in state.jobs:
        if state.jobs[spec.id].spec != spec:
            log.warning("job %s submitted again with another spec: the first submission stands", spec.id)
        return
    state.jobs[spec.id] = Job(spec, event.submission)
    for node in spec.nodes:
        state.node(node)


def heard(state: ClusterState, node_id: str, ts: float) -> None:
    """A node's executor signed a report at `ts`: the node exists (`job submit` checks that a job's
    nodes were heard from). A node outside the cluster is not registered by it."""
    if state.in_cluster(node_id):
        node = state.node(node_id)
        node.heard_from = ts if node.heard_from is None else max(node.heard_from, ts)


def _stop_requested(state: ClusterState, event: JobStopRequested) -> None:
    job = state.jobs.get(event.job)
    if job is None:
        raise Rejected(f"job stop for {event.job}: no such job was submitted")
    if job.closed:
        log.warning("job stop for %s ignored: the job already ended (%s)", event.job, job.state)
        return
    if job.stop is None:
        job.stop = event


def _ranks_finished(state: ClusterState, event: RanksFinished) -> None:
    """Recorded whatever the job's generation now: on a rebuild the plan it answers may be read later."""
    job = state.jobs.get(event.job)
    if job is None:
        log.warning("ranks_finished from %s names job %s, which was never submitted: ignored", event.node,
                    event.job)
        return
    job.finished.add((event.generation, event.node))


def _ended(state: ClusterState, event: JobEnded) -> None:
    """The job is over: its nodes are free, and a capacity re-plan may give them to a waiting job. A
    rejection names a submission the fold never took (a later one of the id may have been): no job."""
    job = state.jobs.get(event.job)
    if job is None or job.closed or event.state == "rejected":
        return
    target = JobState(event.state)
    if job.state is not target:
        job.state = move(JOB_MOVES, job.state, target, f"job {job.spec.id} (job_ended)")
    freed, job.nodes, job.end_reason = job.nodes, (), event.reason or f"job_ended ({event.state})"
    if job.state is JobState.SUCCEEDED:
        job.stop = None  # a stop that came too late, read before this on a rebuild: it did nothing
    if freed:
        state.capacity_ts = event.ts if state.capacity_ts is None else max(state.capacity_ts, event.ts)


def _incident(state: ClusterState, incident: Incident, arrived: float | None) -> None:
    _observed(state, incident.first_ts)
    known = state.incidents.get(incident.id)
    if known is not None and known.status is IncidentStatus.RESOLVED:
        return  # resolved is final
    if arrived is not None and (known is None or known.status is not incident.status):
        state.arrived[incident.id] = arrived  # a copy read again does not move it
    state.incidents[incident.id] = incident
    health.fold_health(state, incident)
    if incident.status is not IncidentStatus.OPEN:
        state.pending.discard(incident.id)
        return
    foreign = incident.node is not None and not state.in_cluster(incident.node)  # decide.py skips it
    if incident.severity in (Severity.SEV1, Severity.SEV2) and not foreign:
        state.failures.add(incident.id)
    if incident.node is not None and not foreign:
        state.node(incident.node)
    if incident.job is not None and (job := state.jobs.get(incident.job)) is not None:
        limits.note_progress(state, job, incident)
    if (incident.severity is not Severity.WARN and incident.action is not Action.ALERT
            and incident.id not in state.handled):
        state.pending.add(incident.id)


def _decided(state: ClusterState, incident_id: str | None, answer: str,
             isolated: dict[str, str] | None, ts: float) -> None:
    """An incident was answered; the nodes the answer isolates leave service."""
    if incident_id is not None:
        state.handled.setdefault(incident_id, answer)
        state.pending.discard(incident_id)
    isolate(state, isolated or {}, ts)


def isolate(state: ClusterState, isolated: dict[str, str], ts: float) -> None:
    """A decision at `ts` takes the nodes of `isolated` (node -> the incident that blamed it) out of
    service: the fold isolates only what a decision on the log says, so the cap counts decisions, not
    incidents. (migrate.py upcasts a log written before decisions said it.)"""
    for node_id, blamed in isolated.items():
        if not state.in_cluster(node_id):
            log.warning("a decision isolates node %s, which is not in the cluster: ignored", node_id)
            continue
        lifecycle.isolated(state, state.node(node_id), blamed, ts)


def _planned(state: ClusterState, plan: RecoveryPlanned) -> None:
    """A plan the job's state table forbids raises IllegalTransition before anything changes."""
    if (plan.plan_id, plan.job) in state.plans:
        return
    unknown = sorted(n for n in (*plan.nodes, *(plan.isolated or {})) if not state.in_cluster(n))
    if unknown:
        raise Rejected(f"plan {plan.plan_id} names {', '.join(unknown[:5])}, not in the cluster")
    job = state.jobs.get(plan.job)
    applies = job is not None and (job.generation is None or plan.generation >= job.generation)
    if applies:
        if plan.kind is RecoveryKind.START:
            target = JobState.STARTING
        elif not plan.nodes:
            target = JobState.STOPPING
        else:
            target = JobState.RECOVERING
        target = move(JOB_MOVES, job.state, target, f"job {job.spec.id} (plan {plan.plan_id})")
    state.plans.add((plan.plan_id, plan.job))
    if plan.incident_id is not None:
        state.handled[plan.incident_id] = plan.plan_id
    _decided(state, plan.incident_id, plan.plan_id, plan.isolated, plan.ts)
    for node in plan.nodes:
        state.node(node)
    if job is None:
        log.warning("plan %s names job %s, which was never submitted: ignored", plan.plan_id, plan.job)
        return
    if plan.kind is RecoveryKind.RECONFIGURE and plan.incident_id is None:
        lifecycle.capacity_decided(state, plan.ts)  # a re-plan for nodes that left or came back
    if plan.kind is RecoveryKind.RESTART and plan.incident_id is not None:
        job.restarts = tuple(sorted((*job.restarts, (plan.ts, plan.incident_id))))
    if not applies:
        return  # superseded before it was read
    job.state = target
    job.generation, job.nodes, job.plan = plan.generation, plan.nodes, plan
    job.steps = plan_steps(plan)
    job.outstanding = {cid for cid in job.steps  # commands read before their plan may be done already
                       if (record := state.commands.get(cid)) is None
                       or record.status is not CommandStatus.DONE}


def _outcome(state: ClusterState, event: RecoveryCompleted | RecoveryFailed) -> None:
    job = state.jobs.get(event.job)
    gave_up = isinstance(event, RecoveryFailed) and job is not None and job.state is JobState.RUNNING
    if (job is None or job.plan is None or job.plan.plan_id != event.plan_id
            or not (job.state.in_flight or gave_up)):
        return  # an older plan's outcome, or one already folded
    if isinstance(event, RecoveryFailed):
        target = JobState.FAILED
    else:
        target = JobState.RUNNING if job.nodes else JobState.QUEUED
    job.state = move(JOB_MOVES, job.state, target, f"job {job.spec.id} (plan {event.plan_id})")


def _skipped(state: ClusterState, event: RecoverySkipped) -> None:
    if event.incident_id is not None:
        _decided(state, event.incident_id, "skipped", event.isolated, event.ts)
    elif event.job is None:
        lifecycle.capacity_decided(state, event.ts)  # no job needed to change for the nodes' change
    elif event.job in state.jobs:
        state.jobs[event.job].not_started = event.reason


def _command(state: ClusterState, command: Command) -> None:
    # the decision itself: signature, deployment, epoch and placement say who sent a copy, and each send
    # sets them anew (the coordinator folds its own commands before signing them: those need no copy)
    unsigned = command
    if (command.signature, command.key_id, command.deployment, command.epoch, command.placement) != (
            None, None, None, None, None):
        unsigned = command.model_copy(update={"signature": None, "key_id": None, "deployment": None,
                                              "epoch": None, "placement": None})
    record = state.commands.get(command.id)
    if record is None:
        record = state.commands[command.id] = CommandRecord(unsigned, (command.ts,))
        for ack in state.early_acks.pop(command.id, []):
            why = unbound(state, record, ack)
            if why is None:
                _answer(state, record, ack)
            else:
                log.warning("early ack for %s dropped: %s", command.id, why)
    elif command.ts not in record.sent:  # a re-send
        record.sent = tuple(sorted((*record.sent, command.ts)))
        if command.ts == record.sent[-1]:
            record.command = unsigned


class UnboundAck(ValueError):
    """An ack that cannot be the answer to the command it names: refused (to the dlq)."""


def unbound(state: ClusterState, record: CommandRecord, ack: CommandAcked) -> str | None:
    """Why `ack` is not an answer to `record`'s command, or None when it can be: an answer comes
    from the command's node, names its job and generation, and is stamped within the time the
    command can be answered in: from its first send (less ACK_SKEW_S of clock skew) to its last
    re-send's deadline. A planted answer to a predictable id has to guess that time."""
    command, config = record.command, state.config
    if (ack.node, ack.job, ack.generation) != (command.node, command.job, command.generation):
        return (f"ack from {ack.node} for {ack.job} generation {ack.generation}, but command {command.id} "
                f"went to {command.node} for {command.job} generation {command.generation}")
    if ack.ts < record.sent[0] - ACK_SKEW_S:
        return f"ack stamped {record.sent[0] - ack.ts:.0f}s before command {command.id} was first sent"
    answerable = (config.max_retries + 1) * config.ack_timeout_s + config.done_timeout_s + ACK_SKEW_S
    if command.deadline is not None:  # a health check is answerable until its deadline
        answerable = max(answerable, command.deadline - record.sent[0] + ACK_SKEW_S)
    if ack.ts > record.sent[0] + answerable:
        return (f"ack stamped {ack.ts - record.sent[0]:.0f}s after command {command.id} was first sent, "
                f"past the {answerable:.0f}s in which it can be answered")
    return None


def _acked(state: ClusterState, ack: CommandAcked) -> None:
    record = state.commands.get(ack.command_id)
    if record is not None:
        why = unbound(state, record, ack)
        if why is not None:
            raise UnboundAck(why)
        _answer(state, record, ack)
        return
    early = state.early_acks
    waiting = early.get(ack.command_id)
    if waiting is None:
        if len(early) >= MAX_EARLY_ACKS:  # a flood of acks for unknown ids: O(1) per ack
            oldest = next(iter(early))
            log.warning("acks waiting for %d unknown commands: dropped those for %s", MAX_EARLY_ACKS, oldest)
            del early[oldest]
        waiting = early[ack.command_id] = []
    if len(waiting) < MAX_ACKS_PER_COMMAND:
        waiting.append(ack)


def _answer(state: ClusterState, record: CommandRecord, ack: CommandAcked) -> None:
    if record.status.terminal:
        return  # the answer to a re-send, or a re-delivered ack
    status = CommandStatus(ack.status.value)
    if status is CommandStatus.REFUSED and record.command.action is CommandAction.HEALTH_CHECK:
        # stale (a clock), fenced (an epoch) or unverified (a key): nothing about the node's hardware. The
        # check stays open, re-sent until its deadline (health.checks_due); the latest refusal is kept
        if record.refused is None or (ack.ts, ack.reason or "") > record.refused:
            record.refused = (ack.ts, ack.reason or "")
        log.warning("health check %s refused by node %s: %s (no answer about the node; re-sent until its "
                    "deadline)", record.command.id, ack.node, ack.reason)
        return
    record.status = move(COMMAND_MOVES, record.status, status, f"command {record.command.id}")
    if status is CommandStatus.ACCEPTED:
        record.accepted_ts = ack.ts if record.accepted_ts is None else record.accepted_ts
    else:
        record.reason = ack.reason
    if status is CommandStatus.DONE and (job := state.jobs.get(record.command.job)) is not None:
        job.outstanding.discard(record.command.id)
