"""One log line per decision, for an operator: what happened → what was decided → which commands.

Lines are terminal-safe (schemas/printable.py): reasons and evidence carry what ranks wrote."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

from trainmedic.recovery.coordinator.core.membership import ROTATION_GRACE_S
from trainmedic.recovery.coordinator.core.state import ClusterState
from trainmedic.schemas.commands import (
    Command,
    CommandAcked,
    CommandAction,
    NodeKeyRotated,
    NodeRegistered,
    RanksFinished,
)
from trainmedic.schemas.incident import Incident
from trainmedic.schemas.jobs import JobStopRequested, JobSubmitted
from trainmedic.schemas.nodes import NodeEnrolled, NodeReadmitted, NodeRemoved
from trainmedic.schemas.printable import terminal_safe
from trainmedic.schemas.recovery import (
    JobEnded,
    RecoveryCompleted,
    RecoveryFailed,
    RecoveryKind,
    RecoveryPlanned,
    RecoverySkipped,
)


def cause(event: object) -> str:
    """What prompted a decision, in a few words."""
    match event:
        case Incident():
            where = ", ".join(f"{k} {v}" for k, v in (("job", event.job), ("node", event.node)) if v)
            return f"incident {event.id} ({event.severity} {event.category}{', ' + where if where else ''})"
        case JobSubmitted():
            return f"job {event.job.id} submitted"
        case CommandAcked():
            return f"{event.status} from {event.node} for {event.command_id}"
        case RanksFinished():
            return f"ranks of {event.job} generation {event.generation} finished on {event.node}"
        case JobStopRequested():
            return f"job {event.job} stopped by {event.by}" + (f" ({event.reason})" if event.reason else "")
    return str(event)


def membership(event: NodeEnrolled | NodeRegistered | NodeKeyRotated | NodeRemoved) -> str:
    """What an enrollment, a registration, a key rotation or a removal changed, for the log
    (terminal-safe)."""
    match event:
        case NodeEnrolled():
            line = (f"node {event.node} enrolled by {event.by}: its join token may register it until "
                    f"{_utc(event.expires)}")
        case NodeRegistered():
            line = (f"node {event.node} registered key {event.key.key_id} at {event.address} with "
                    f"{event.gpus} GPUs: it takes work once its executor joins with that key")
        case NodeKeyRotated():
            line = (f"node {event.node} rotated its key {event.key_id} to {event.key.key_id}: the old one "
                    f"signs for {ROTATION_GRACE_S:g} s more")
        case _:
            why = f" ({event.reason})" if event.reason else ""
            line = (f"node {event.node} removed by {event.by}{why}: its key is trusted no more, its jobs "
                    "move off it")
    return terminal_safe(line)


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _nodes(nodes: tuple[str, ...], limit: int = 8) -> str:
    shown = " ".join(nodes[:limit])
    return f"[{shown}{f' +{len(nodes) - limit}' if len(nodes) > limit else ''}]"


def _plan_of(state: ClusterState, outputs: list, done: RecoveryCompleted) -> RecoveryPlanned | None:
    """The plan a completion is for: emitted with it, or the plan the state holds (None: unknown)."""
    for event in outputs:
        if isinstance(event, RecoveryPlanned) and (event.plan_id, event.job) == (done.plan_id, done.job):
            return event
    held = state.jobs.get(done.job)
    return held.plan if held and held.plan and held.plan.plan_id == done.plan_id else None


def _completed(trigger: str, done: RecoveryCompleted, plan: RecoveryPlanned | None) -> str:
    """A completed plan as what it is: its commands acknowledged (no step yet), or its job queued."""
    if plan is not None and plan.kind == RecoveryKind.STOP:
        return f"{trigger} → plan {done.plan_id}: {done.job} stopped on every node, as asked"
    if plan is not None and not plan.nodes:
        return (f"{trigger} → plan {done.plan_id}: {done.job} stopped on every node, queued until nodes "
                "free up")
    meaning = ("" if plan is None else " (ranks retried in place)" if plan.kind == RecoveryKind.REATTEMPT
               else " (workers started, not yet stepping)")
    return (f"{trigger} → plan {done.plan_id}: every command of {done.job} generation {done.generation} "
            f"acknowledged{meaning}")


def narrate(trigger: str, outputs: list, state: ClusterState) -> list[str]:
    """Log lines for the events emitted in answer to `trigger` (`state` after it: which nodes the plans
    that completed placed their jobs on)."""
    lines = []
    commands: dict[tuple[str, str, int], list[Command]] = defaultdict(list)
    planned = set()
    for event in outputs:
        if isinstance(event, Command) and event.action is CommandAction.HEALTH_CHECK:
            record = state.commands.get(event.id)
            again = " again" if record is not None and len(record.sent) > 1 else ""
            due = (event.deadline or event.ts) - event.ts
            lines.append(f"{trigger} → health check {event.id} sent{again} to {event.node} (answer due "
                         f"within {due:.0f} s)")
        elif isinstance(event, Command):
            commands[(event.plan_id, event.job, event.generation)].append(event)
    for event in outputs:
        match event:
            case RecoveryPlanned():
                key = (event.plan_id, event.job, event.generation)
                planned.add(key)
                actions: dict[str, list[str]] = defaultdict(list)
                for command in commands.get(key, []):
                    actions[command.action].append(command.node)
                issued = ", ".join(f"{a} {_nodes(tuple(n))}" for a, n in actions.items()) or "none"
                horizon = f" (horizon {event.horizon_s / 3600:.1f} h)" if event.horizon_s else ""
                queued = ("" if event.nodes or event.kind == RecoveryKind.STOP
                          else " (no nodes: the job stops and is queued)")
                lines.append(f"{trigger} → {event.kind} plan {event.plan_id}: {event.job} generation "
                             f"{event.generation} {_nodes(event.previous)} → {_nodes(event.nodes)}{horizon}"
                             f"{queued}; commands: {issued}")
            case RecoverySkipped():
                lines.append(f"{trigger} → no action: {event.reason}")
            case RecoveryCompleted():
                lines.append(_completed(trigger, event, _plan_of(state, outputs, event)))
            case RecoveryFailed():
                then = f" → escalated to incident {event.escalation}" if event.escalation else ""
                lines.append(f"{trigger} → plan {event.plan_id} for {event.job} failed: {event.reason}{then}")
            case NodeReadmitted():
                lines.append(f"{trigger} → re-admitted node {event.node}: {event.reason}")
            case JobEnded():
                free = "" if event.state == "rejected" else "; its nodes are free"
                lines.append(f"{trigger} → job {event.job} {event.state}: {event.reason}{free}")
            case Incident() if event.status == "resolved":
                lines.append(f"{trigger} → resolved {cause(event)}: {(event.evidence or ('',))[-1]}")
            case Incident():
                lines.append(f"{trigger} → raised {cause(event)}: {'; '.join(event.evidence)}")
    for key, sent in commands.items():
        if key not in planned:
            lines.append(f"{trigger} → sent again: " + ", ".join(
                f"{c.action} to {c.node} ({c.job} generation {c.generation}, {c.id})" for c in sent))
    return [terminal_safe(line) for line in lines]
