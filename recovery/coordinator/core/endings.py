"""What the coordinator adds when a job ends or its submission is refused: the job's open incidents,
resolved with why it ended, and `job_ended` (rejected) for a refused submission, so `job list` and
`job submit` can say why; pure (docs/coordinator.md, "A job ends").
"""

from __future__ import annotations

from collections.abc import Iterable

from trainmedic.recovery.coordinator.core.blame import blames_node
from trainmedic.recovery.coordinator.core.state import ClusterState
from trainmedic.schemas.bounds import MAX_SMALL_ITEMS
from trainmedic.schemas.incident import Action, Incident, IncidentStatus, Severity
from trainmedic.schemas.jobs import JobSubmitted
from trainmedic.schemas.recovery import JobEnded


def rejected(state: ClusterState, event: object, why: str, now: float) -> list[JobEnded]:
    """`job_ended` (rejected, `why`) for a job submission the coordinator refused; none for another
    record, or when the state holds a job of that id (that submission stands)."""
    if not isinstance(event, JobSubmitted) or event.job.id in state.jobs:
        return []
    return [JobEnded(ts=now, job=event.job.id, state="rejected", reason=why)]


def unanswered(state: ClusterState, events: Iterable[object], refused: Iterable[tuple[object, str]],
               now: float) -> list[JobEnded]:
    """`rejected` for each submission in `refused` (records a rebuild could not fold, with why) that
    `events` (the log) holds no rejection of: one refused while no coordinator led."""
    answered = {e.job for e in events if isinstance(e, JobEnded) and e.state == "rejected"}
    out: dict[str, JobEnded] = {}
    for event, why in refused:
        for ended in rejected(state, event, why, now):
            if ended.job not in answered:
                out.setdefault(ended.job, ended)
    return list(out.values())


def resolutions(state: ClusterState, outputs: list, now: float) -> list[Incident]:
    """For each job `outputs` end: its open incidents, resolved with why it ended. One that blames or
    isolated its node stays open (the node's re-admission reads it), and so does an alert for a person."""
    ends = [event for event in outputs if isinstance(event, JobEnded) and event.state != "rejected"]
    if not ends:
        return []  # the common case: no scan of the cluster's nodes
    isolating = {incident_id for node in state.nodes.values() for _, incident_id in node.isolations}
    out = []
    for ended in ends:
        why = f"{now:.3f} resolved: job {ended.job} ended {ended.state}"
        why += ended.reason and f": {ended.reason}"
        out += [incident.model_copy(update={"status": IncidentStatus.RESOLVED, "ts": max(now, incident.ts),
                                            "evidence": (*incident.evidence[:MAX_SMALL_ITEMS - 1], why)})
                for incident in state.incidents.values()
                if incident.job == ended.job and incident.status is IncidentStatus.OPEN
                and incident.action is not Action.ALERT and incident.id not in isolating
                and not (incident.severity is Severity.SEV1 and incident.node is not None
                         and blames_node(state, incident))]
    return sorted(out, key=lambda incident: incident.id)
