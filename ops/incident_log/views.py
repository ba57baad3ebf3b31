"""Views derived from the fold: one row per incident, and the ordered story of one incident.

Derived on demand, never stored, so they inherit the fold's independence from order.
"""

from __future__ import annotations

from dataclasses import dataclass

from ops.incident_log.fold import IncidentHistory
from schemas.incident import Incident, IncidentStatus
from schemas.recovery import RecoveryCompleted, RecoveryFailed, RecoveryPlanned, RecoverySkipped
from schemas.telemetry import WorkerStepped


@dataclass(frozen=True)
class IncidentView:
    """One incident's whole lifecycle: its latest fields and what recovery did about it."""

    incident: Incident  # the latest event seen (resolved if it was)
    opened: Incident | None
    resolved: Incident | None
    plans: tuple[RecoveryPlanned, ...]
    outcomes: tuple[RecoveryCompleted | RecoveryFailed, ...]
    skipped: RecoverySkipped | None
    escalated_from: str | None  # the incident whose failed recovery raised this one
    restore_warnings: tuple[WorkerStepped, ...] = ()  # ranks of its plans' generations that lost steps

    @property
    def id(self) -> str:
        return self.incident.id

    @property
    def status(self) -> str:
        return str(self.incident.status)

    @property
    def recovery(self) -> str:
        """What recovery did: -, skipped, planned, completed or failed (the latest outcome wins)."""
        if self.outcomes:
            return "completed" if isinstance(self.outcomes[-1], RecoveryCompleted) else "failed"
        if self.plans:
            return "planned"
        return "skipped" if self.skipped else "-"

    @property
    def escalated_to(self) -> tuple[str, ...]:
        return tuple(o.escalation for o in self.outcomes if isinstance(o, RecoveryFailed) and o.escalation)

    @property
    def detection_delay_s(self) -> float | None:
        return None if self.opened is None else self.opened.ts - self.opened.first_ts

    @property
    def time_to_resolve_s(self) -> float | None:
        return None if self.resolved is None else self.resolved.ts - self.resolved.first_ts

    @property
    def time_to_resume_s(self) -> float | None:
        """From the earliest evidence to the first plan that completed."""
        done = [o.ts for o in self.outcomes if isinstance(o, RecoveryCompleted)]
        return min(done) - self.incident.first_ts if done else None


def _view(history: IncidentHistory, iid: str, escalations: dict[str, str]) -> IncidentView:
    seen = history.statuses(iid)
    opened, resolved = seen.get(IncidentStatus.OPEN), seen.get(IncidentStatus.RESOLVED)
    plans = tuple(sorted((p for p in history.plans.values() if p.incident_id == iid),
                         key=lambda p: (p.ts, p.plan_id, p.job)))
    outcomes = tuple(sorted((history.outcomes[(p.plan_id, p.job)] for p in plans
                             if (p.plan_id, p.job) in history.outcomes),
                            key=lambda o: (o.ts, o.plan_id, o.job)))
    generations = {(p.job, p.generation) for p in plans}
    warnings = tuple(sorted((w for (job, gen, _), w in history.restore_warnings.items()
                             if (job, gen) in generations), key=lambda w: (w.ts, w.rank)))
    return IncidentView(incident=resolved or opened, opened=opened, resolved=resolved, plans=plans,
                        outcomes=outcomes, skipped=history.skips.get(iid),
                        escalated_from=escalations.get(iid), restore_warnings=warnings)


def _escalations(history: IncidentHistory) -> dict[str, str]:
    """Escalated incident id -> the incident whose plan failed into it."""
    out = {}
    for (plan_id, job), outcome in history.outcomes.items():
        plan = history.plans.get((plan_id, job))
        if isinstance(outcome, RecoveryFailed) and outcome.escalation and plan and plan.incident_id:
            out[outcome.escalation] = plan.incident_id
    return out


def views(history: IncidentHistory) -> list[IncidentView]:
    """Every incident the history holds an incident event for, by earliest evidence (then id)."""
    escalations = _escalations(history)
    ids = {iid for iid, _ in history.incidents}
    found = [_view(history, iid, escalations) for iid in ids]
    return sorted(found, key=lambda v: (v.incident.first_ts, v.id))


def find(history: IncidentHistory, prefix: str) -> list[IncidentView]:
    """The incidents whose id is `prefix` exactly, else those whose id starts with it."""
    every = views(history)
    exact = [v for v in every if v.id == prefix]
    return exact or [v for v in every if v.id.startswith(prefix)]


@dataclass(frozen=True)
class Entry:
    """One line of an incident's story: when, what kind of step, and what it said."""

    ts: float
    what: str
    detail: str


def _nodes(nodes: tuple[str, ...]) -> str:
    return "[" + " ".join(nodes) + "]"


def timeline(view: IncidentView) -> list[Entry]:
    """The ordered story: detected, opened (and why it escalated), plans, outcomes, restores that fell
    back from their replica (steps lost), resolved."""
    inc = view.incident
    entries = [Entry(inc.first_ts, "detected", "earliest evidence")]
    if view.opened is not None:
        o = view.opened
        where = " ".join(f"{k}={v}" for k, v in (("job", o.job), ("node", o.node)) if v)
        entries.append(Entry(o.ts, "opened", f"{o.severity} {o.category} → {o.action} {where}".rstrip()))
        for line in o.evidence:
            entries.append(Entry(o.ts, "escalated" if line.startswith("escalated ") else "evidence", line))
        if view.escalated_from:
            entries.append(Entry(o.ts, "escalated", f"raised as recovery of {view.escalated_from} failed"))
    if view.skipped is not None:
        entries.append(Entry(view.skipped.ts, "no action", view.skipped.reason))
    for p in view.plans:
        entries.append(Entry(p.ts, "plan issued", f"{p.kind} plan {p.plan_id}: {p.job} generation "
                                                  f"{p.generation} {_nodes(p.previous)} → {_nodes(p.nodes)}"))
    for out in view.outcomes:
        if isinstance(out, RecoveryCompleted):
            entries.append(Entry(out.ts, "recovered", f"plan {out.plan_id}: {out.job} generation "
                                                      f"{out.generation} acknowledged up"))
        else:
            then = f" → escalated to {out.escalation}" if out.escalation else ""
            entries.append(Entry(out.ts, "recovery failed", f"plan {out.plan_id}: {out.reason}{then}"))
    for w in view.restore_warnings:
        entries.append(Entry(w.ts, "RESTORE FELL BACK", f"{w.job} generation {w.generation} rank {w.rank} "
                                                        f"on {w.node}: {w.restore_warning}"))
    if view.resolved is not None:
        known = set(view.opened.evidence) if view.opened else set()
        for line in view.resolved.evidence:
            if line not in known:
                entries.append(Entry(view.resolved.ts, "evidence", line))
        entries.append(Entry(view.resolved.ts, "resolved", f"after {view.time_to_resolve_s:.3f}s"))
    order = {w: i for i, w in enumerate(("detected", "opened", "escalated", "evidence", "no action",
                                         "plan issued", "recovered", "recovery failed",
                                         "RESTORE FELL BACK", "resolved"))}
    return sorted(entries, key=lambda e: (e.ts, order[e.what]))
