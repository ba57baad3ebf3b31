"""Suspect nodes and their health checks; pure. What jobs report never isolates a node: where two jobs
failed (`blame.other_failures`) the node becomes suspect (a `node_suspect` incident on `recovery`: it
keeps its job, takes no new work) and its executor gets a `health_check` command with a deadline,
counted from the check's first send. The node's own signed answer decides: `done` ends the suspicion,
`failed`, or no answer by the deadline though the node took the check or never answered at all,
escalates to a SEV1 `health_check_failed` of the node, isolated within the cap. A `refused` answer
(stale, fenced, unverified) says nothing of the hardware: the check stays open, and a deadline reached
with only refusals raises a WARN `health_check_refused` for a person, never an isolation. An uncordon,
a re-admission, or a return from a leave later than the suspicion vouches for the node and ends it
(docs/coordinator.md, "Blast-radius limits and blame").
"""

from __future__ import annotations

from trainmedic.recovery.coordinator.core.blame import (
    HEALTH_CHECK_FAILED,
    HEALTH_CHECK_REFUSED,
    NODE_SUSPECT,
    other_failures,
)
from trainmedic.recovery.coordinator.core.commands import digest, escalation_id
from trainmedic.recovery.coordinator.core.state import ClusterState, CommandRecord, CommandStatus, Node
from trainmedic.schemas.bounds import MAX_SMALL_ITEMS
from trainmedic.schemas.commands import HEALTH_CHECK_JOB, Command, CommandAction
from trainmedic.schemas.incident import Action, Incident, IncidentStatus, Severity


def suspicion_id(node: str, incident_id: str) -> str:
    """The `node_suspect` incident that `incident_id` (the second job's failure) raises: one per failure."""
    return f"esc-{digest('suspect', node, incident_id)}"


def check_id(suspicion: str) -> str:
    """The health check of one suspicion, however often it is issued or re-sent."""
    return f"cmd-{digest('health_check', suspicion)}"


def refusal_id(check: str) -> str:
    """The WARN a check answered only by refusals raises at its deadline: one per check."""
    return f"esc-{digest('health_check_refused', check)}"


def suspect(state: ClusterState, incident: Incident, now: float) -> list:
    """The node of `incident` made suspect, with its health check, when another job failed there too;
    nothing when it is suspect already, isolated, leaving, or was just vouched for."""
    node = state.nodes.get(incident.node) if incident.node is not None else None
    if node is None or node.suspect_by is not None or not state.awaited(node.id):
        return []
    suspicion_of = suspicion_id(node.id, incident.id)
    if suspicion_of in state.incidents:
        return []  # raised for this failure before; its check was answered
    others = sorted({other.job for other in other_failures(state, incident)})
    if not others:
        return []
    alert = Incident(
        ts=now, id=suspicion_of, status=IncidentStatus.OPEN, category=NODE_SUSPECT, severity=Severity.WARN,
        action=Action.ALERT, node=node.id, first_ts=incident.first_ts,
        evidence=(f"jobs {incident.job} and {' '.join(others[:5])} failed on node {node.id} "
                  f"(incident {incident.id}, {incident.category}): what jobs report never isolates a node",
                  f"the node keeps its job, takes no new work, and runs its health check (deadline "
                  f"{state.config.health_check_deadline_s:g} s); a failed check or none isolates it"),
    )
    return [alert, check_command(state, alert, now)]


def check_command(state: ClusterState, suspicion: Incident, now: float) -> Command:
    """The health check of `suspicion`, first sent at `now`: its deadline counts from then (never
    before the suspicion), so a node checked late, by a coordinator restarted past the suspicion's
    deadline, still has its time. Re-sends copy it; a rebuilt coordinator reads it from the log."""
    return Command(ts=now, node=suspicion.node, id=check_id(suspicion.id), incident_id=suspicion.id,
                   job=HEALTH_CHECK_JOB, generation=0, action=CommandAction.HEALTH_CHECK,
                   deadline=max(suspicion.ts, now) + state.config.health_check_deadline_s)


def checks_due(state: ClusterState, now: float) -> list:
    """For every suspect node, at `now`: resolve a suspicion an uncordon, re-admission or return
    vouched for; issue a check the log lacks; decide an answer not decided; re-send it every
    `ack_timeout_s` until its deadline while no final answer came (an executor restarted after it
    accepted runs it again); at the deadline, fail it, or raise a WARN when the node only refused it.
    A check to an isolated or leaving node waits: it is not the node's turn."""
    out: list = []
    for node_id in sorted(state.suspected):
        node = state.nodes[node_id]
        vouched = state.incidents.get(node.suspicion_vouched or "")
        if vouched is not None:
            by = vouched_by(node, vouched.ts) or "an uncordon, re-admission or return"
            out.append(_resolved(vouched, now, f"vouched for by {by}, later than the suspicion: its "
                                               f"health check is over"))
        suspicion = state.incidents.get(node.suspect_by or "")
        if suspicion is None or not state.awaited(node_id):
            continue
        record = state.commands.get(check_id(suspicion.id))
        if record is None:
            out.append(check_command(state, suspicion, now))
        elif record.status.terminal:
            out += answered(state, suspicion, record, now)
        elif now >= (deadline := _deadline(state, record)):
            out += _unanswered(suspicion, record, deadline, now)
        elif now >= record.sent[-1] + state.config.ack_timeout_s:
            out.append(record.command.model_copy(update={"ts": now}))
    return out


def _deadline(state: ClusterState, record: CommandRecord) -> float:
    command = record.command
    return command.deadline if command.deadline is not None else (
        record.sent[0] + state.config.health_check_deadline_s)


def vouched_by(node: Node, since: float) -> str | None:
    """What vouches for `node` after `since` (a suspicion's time): an uncordon or re-admission, or a
    join that ended a leave; None when nothing did. An executor that restarts without a leave vouches
    for nothing: the check is re-sent to it."""
    if node.returned_ts is not None and node.returned_ts > since:
        return f"an uncordon or re-admission at {node.returned_ts:.3f}"
    if node.rejoined_ts is not None and node.rejoined_ts > since:
        return f"its return from a leave at {node.rejoined_ts:.3f}"
    return None


def on_check_answer(state: ClusterState, record: CommandRecord, now: float) -> list:
    """A node answered its health check (folded in `record`): decide it, once."""
    suspicion = state.incidents.get(record.command.incident_id or "")
    node = state.nodes.get(record.command.node)
    if suspicion is None or node is None or node.suspect_by != suspicion.id or not record.status.terminal:
        return []
    return answered(state, suspicion, record, now)


def answered(state: ClusterState, suspicion: Incident, record: CommandRecord, now: float) -> list:
    """`done`: the suspicion is resolved (the node takes work again; the jobs' incidents stay the
    jobs'). `failed`: the node's own answer about itself fails it. (A refusal is never final: fold.py.)"""
    if record.status is CommandStatus.DONE:
        why = f"health check {record.command.id} passed on {suspicion.node}"
        return [_resolved(suspicion, now, why + (f": {record.reason}" if record.reason else ""))]
    said = str(record.status) + (f": {record.reason}" if record.reason else "")
    return _failed(suspicion, record, now, said)


def _resolved(suspicion: Incident, now: float, why: str) -> Incident:
    return suspicion.model_copy(update={
        "status": IncidentStatus.RESOLVED, "ts": max(now, suspicion.ts),
        "evidence": (*suspicion.evidence[:MAX_SMALL_ITEMS - 1], f"{now:.3f} resolved: {why}")})


def _unanswered(suspicion: Incident, record: CommandRecord, deadline: float, now: float) -> list:
    """The deadline passed with no final answer: the node took the check (or never answered at all)
    and did not answer in time, which fails it; or it only refused it, which is no evidence about the
    node: a WARN for a person (a clock, a key or a fence to fix), the node held from new work."""
    took = f"{deadline - record.sent[0]:g} s after it was first sent ({len(record.sent)} send(s))"
    if record.status is CommandStatus.ISSUED and record.refused is not None:
        return [Incident(
            ts=now, id=refusal_id(record.command.id), status=IncidentStatus.OPEN,
            category=HEALTH_CHECK_REFUSED, severity=Severity.WARN, action=Action.ALERT, node=suspicion.node,
            first_ts=now,
            evidence=(f"health check {record.command.id} of node {suspicion.node}: refused until its "
                      f"deadline, {took}; latest refusal: {record.refused[1]}",
                      "a refusal (stale clock, epoch fence, unverified signature) says nothing of the "
                      "node's hardware: it is not isolated; it takes no new work until an operator "
                      "fixes the cause and uncordons it",
                      f"suspect since incident {suspicion.id}: " + (suspicion.evidence[:1] or ("",))[0]),
        )]
    said = "accepted it but" if record.status is CommandStatus.ACCEPTED else "was sent it and"
    refused = f"; it also refused a send: {record.refused[1]}" if record.refused is not None else ""
    return _failed(suspicion, record, now, f"timed out: the node {said} did not answer by its deadline, "
                                           f"{took}{refused}")


def _failed(suspicion: Incident, record: CommandRecord, now: float, why: str) -> list[Incident]:
    """The node's own evidence against it: a SEV1 of the node, decided as any node SEV1 (grouped,
    capped). Its id is the check's escalation, so it is raised once."""
    return [Incident(
        ts=now, id=escalation_id(record.command.id), status=IncidentStatus.OPEN, category=HEALTH_CHECK_FAILED,
        severity=Severity.SEV1, action=Action.RECONFIGURE, node=suspicion.node, first_ts=now,
        evidence=(f"health check {record.command.id} of node {suspicion.node}: {why}",
                  f"suspect since incident {suspicion.id}: " + (suspicion.evidence[:1] or ("",))[0]),
    )]


def fold_health(state: ClusterState, incident: Incident) -> None:
    """Fold the coordinator's own health incidents: a `node_suspect` opens a check (the newest one
    holds) unless the node was vouched for since, and, resolved, vouches for the node from its time; a
    `health_check_failed` or `health_check_refused` ends the check."""
    if incident.node is None or not state.in_cluster(incident.node):
        return
    node = state.node(incident.node)
    if incident.category == NODE_SUSPECT and incident.status is IncidentStatus.OPEN:
        current = state.incidents.get(node.suspect_by or "")
        if current is None or (incident.ts, incident.id) > (current.ts, current.id):
            node.suspect_by = incident.id
            state.suspected.add(node.id)
            returned(state, node.id)
    elif incident.category == NODE_SUSPECT:
        node.vouched_ts = incident.ts if node.vouched_ts is None else max(node.vouched_ts, incident.ts)
        _ended(state, incident.node, incident.id)
    elif node.suspect_by is not None and incident.id in (escalation_id(check_id(node.suspect_by)),
                                                          refusal_id(check_id(node.suspect_by))):
        _ended(state, incident.node, node.suspect_by)


def returned(state: ClusterState, node_id: str) -> None:
    """After an uncordon, re-admission, join or leave of the node, or a suspicion of it, folded in any
    order: a suspicion older than what vouches for the node (`vouched_by`) ends; its check is over
    (a late answer is nobody's), and `checks_due` resolves it."""
    node = state.nodes.get(node_id)
    suspicion = state.incidents.get(node.suspect_by or "") if node is not None else None
    if suspicion is None or vouched_by(node, suspicion.ts) is None:
        return
    newest = state.incidents.get(node.suspicion_vouched or "")
    if newest is None or (suspicion.ts, suspicion.id) > (newest.ts, newest.id):
        node.suspicion_vouched = suspicion.id
    node.suspect_by = None


def _ended(state: ClusterState, node_id: str, suspicion: str) -> None:
    node = state.nodes[node_id]
    if node.suspect_by == suspicion:
        node.suspect_by = None
    if node.suspicion_vouched == suspicion:
        node.suspicion_vouched = None
    if node.suspect_by is None and node.suspicion_vouched is None:
        state.suspected.discard(node_id)
