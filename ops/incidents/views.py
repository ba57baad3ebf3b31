"""Views derived from the incident fold, on demand and never stored (so as independent of order as
it is): one row per incident, and the ordered story of one incident (docs/coordinator.md)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import NamedTuple

from trainmedic.ops.incidents.evidence import stamped
from trainmedic.ops.incidents.fold import IncidentHistory
from trainmedic.ops.incidents.phases import Phase, milestones, phases
from trainmedic.schemas.incident import Incident, IncidentStatus
from trainmedic.schemas.recovery import (
    RecoveryCompleted,
    RecoveryFailed,
    RecoveryKind,
    RecoveryPlanned,
    RecoverySkipped,
)
from trainmedic.schemas.restores import Restore, restores
from trainmedic.schemas.telemetry import WorkerStepped


class Resumed(NamedTuple):
    """A job a plan placed on nodes, stepping again: the first step completed after the repair."""

    job: str
    generation: int
    ts: float


@dataclass(frozen=True)
class IncidentView:
    """One incident's whole lifecycle: its latest fields and what recovery did about it.

    Every duration is measured from the incident's earliest evidence (`first_ts`): the log does not
    know when the fault itself happened, only the first moment something showed it.
    """

    incident: Incident  # the latest event seen (resolved if it was)
    opened: Incident | None
    resolved: Incident | None
    plans: tuple[RecoveryPlanned, ...]
    outcomes: tuple[RecoveryCompleted | RecoveryFailed, ...]
    skipped: RecoverySkipped | None
    escalated_from: str | None  # the incident whose failed recovery raised this one
    restore_warnings: tuple[WorkerStepped, ...] = ()  # ranks of its plans' generations that lost steps
    published: float | None = None  # when the opened incident reached Kafka (its message time)
    resumed: tuple[Resumed, ...] = ()  # per job placed on nodes, its first step after the repair
    restores: tuple[Restore, ...] = ()  # per job and generation of its plans, where the state came from
    phases: tuple[tuple[str, tuple[Phase, ...]], ...] = ()  # per job resumed, where the seconds went

    @property
    def id(self) -> str:
        return self.incident.id

    @property
    def status(self) -> str:
        return str(self.incident.status)

    @property
    def recovery(self) -> str:
        """What recovery did: -, skipped, planned, completed, queued (the job was stopped and waits
        for nodes) or failed; the latest outcome wins."""
        if self.outcomes:
            last = self.outcomes[-1]
            if isinstance(last, RecoveryFailed):
                return "failed"
            return "queued" if self._plan_of(last).nodes == () else "completed"
        if self.plans:
            return "planned"
        return "skipped" if self.skipped else "-"

    def _plan_of(self, outcome: RecoveryCompleted | RecoveryFailed) -> RecoveryPlanned:
        return next(p for p in self.plans if (p.plan_id, p.job) == (outcome.plan_id, outcome.job))

    @property
    def queued_jobs(self) -> tuple[str, ...]:
        """Jobs whose latest plan for this incident took every node: stopped, waiting for nodes."""
        return tuple(job for job, plan in latest_plans(self.plans).items() if not plan.nodes)

    @property
    def escalated_to(self) -> tuple[str, ...]:
        return tuple(o.escalation for o in self.outcomes if isinstance(o, RecoveryFailed) and o.escalation)

    @property
    def detection_delay_s(self) -> float | None:
        """First evidence → the incident decided (its `ts`, event time)."""
        return None if self.opened is None else self.opened.ts - self.opened.first_ts

    @property
    def publication_delay_s(self) -> float | None:
        """First evidence → the opened incident on Kafka (its message time)."""
        if self.opened is None or self.published is None:
            return None
        return self.published - self.opened.first_ts

    @property
    def time_to_resolve_s(self) -> float | None:
        return None if self.resolved is None else self.resolved.ts - self.resolved.first_ts

    @property
    def time_to_ack_s(self) -> float | None:
        """First evidence → every command of a plan that placed its job on nodes acknowledged: the
        workers were started (or retried), not yet stepping."""
        done = [o.ts for o in self.outcomes if isinstance(o, RecoveryCompleted) and self._plan_of(o).nodes]
        return min(done) - self.incident.first_ts if done else None

    @property
    def time_to_resume_s(self) -> float | None:
        """First evidence → the first completed step after the repair, of every job the incident's
        plans placed on nodes (the last of them); None until each has stepped, or with none placed."""
        placed = {job for job, plan in latest_plans(self.plans).items() if plan.nodes}
        stepped = {r.job: r.ts for r in self.resumed}
        if not placed or not placed <= set(stepped):
            return None
        return max(stepped[job] for job in placed) - self.incident.first_ts


def latest_plans(plans: tuple[RecoveryPlanned, ...]) -> dict[str, RecoveryPlanned]:
    """Each job's latest plan (`plans` is in time order)."""
    return {p.job: p for p in plans}


def first_step_after_repair(plan: RecoveryPlanned, outcomes: tuple[RecoveryCompleted | RecoveryFailed, ...],
                            steps: set[float]) -> float | None:
    """When `plan`'s job completed its first step after the repair, from the step times of the
    plan's generation: its first step, or after a reattempt (the same generation, the ranks kept
    running) the first step after the reattempt was acknowledged."""
    if plan.kind != RecoveryKind.REATTEMPT:
        return min(steps, default=None)
    acked = next((o.ts for o in outcomes if isinstance(o, RecoveryCompleted)
                  and (o.plan_id, o.job) == (plan.plan_id, plan.job)), None)
    return None if acked is None else min((ts for ts in steps if ts > acked), default=None)


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
    restored = restores([s for (job, gen, _), s in history.restores.items() if (job, gen) in generations])
    published = history.published.get((iid, str(IncidentStatus.OPEN)))
    resumed, timed = [], []
    for job, plan in sorted(latest_plans(plans).items()):
        ts = first_step_after_repair(plan, outcomes, history.steps.get((job, plan.generation), set()))
        if plan.nodes and ts is not None:
            resumed.append(Resumed(job, plan.generation, ts))
            if opened is not None and plan.kind != RecoveryKind.REATTEMPT:
                done = next((o for o in outcomes if isinstance(o, RecoveryCompleted)
                             and (o.plan_id, o.job) == (plan.plan_id, plan.job)), None)
                timed.append((job, phases(milestones(history, opened, published, plan, done, ts))))
    return IncidentView(incident=resolved or opened, opened=opened, resolved=resolved, plans=plans,
                        outcomes=outcomes, skipped=history.skips.get(iid),
                        escalated_from=escalations.get(iid), restore_warnings=warnings,
                        published=published, resumed=tuple(resumed), restores=restored, phases=tuple(timed))


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


def _acked(plan: RecoveryPlanned) -> str:
    """What a plan's commands done means: not yet a step."""
    if plan.kind == RecoveryKind.REATTEMPT:
        return "ranks retried in place"
    return "workers started, not yet stepping"


def _nodes(nodes: tuple[str, ...]) -> str:
    return "[" + " ".join(nodes) + "]"


# How entries at the same instant are told: what was seen before what was decided from it.
ORDER = ("detected", "evidence", "opened", "escalated", "on kafka", "no action", "plan issued",
         "acknowledged", "queued", "recovery failed", "restored", "resumed", "RESTORE FELL BACK", "resolved")


def _evidence(lines: tuple[str, ...], default_ts: float, skip: Collection[str] = ()) -> list[Entry]:
    """One entry per evidence line at the time it says it was seen (else `default_ts`, the
    decision's), without the stamp: the story shows times its own way."""
    out = []
    for line in lines:
        if line in skip:
            continue
        ts, text = stamped(line)
        what = "escalated" if text.startswith("escalated ") else "evidence"
        out.append(Entry(default_ts if ts is None else ts, what, text))
    return out


def evidence_entries(view: IncidentView) -> list[Entry]:
    """An incident's evidence in the order it was seen; a line without a time at the time of the
    decision that first carried it (opened, or resolved)."""
    opened = view.opened.evidence if view.opened else ()
    entries = _evidence(opened, view.opened.ts) if view.opened else []
    if view.resolved is not None:
        entries += _evidence(view.resolved.evidence, view.resolved.ts, skip=set(opened))
    return sorted(entries, key=lambda e: e.ts)


def timeline(view: IncidentView) -> list[Entry]:
    """The story in event time: detected, each piece of evidence when it was seen, opened (and why
    it escalated), on Kafka, plans, outcomes, the first step after the repair, restores that fell
    back from their replica (steps lost), resolved."""
    inc = view.incident
    entries = [Entry(inc.first_ts, "detected", "earliest evidence"), *evidence_entries(view)]
    if view.opened is not None:
        o = view.opened
        where = " ".join(f"{k}={v}" for k, v in (("job", o.job), ("node", o.node)) if v)
        entries.append(Entry(o.ts, "opened", f"{o.severity} {o.category} → {o.action} {where}".rstrip()))
        if view.escalated_from:
            entries.append(Entry(o.ts, "escalated", f"raised as recovery of {view.escalated_from} failed"))
        if view.published is not None:
            entries.append(Entry(view.published, "on kafka", "the incident reached the incidents topic"))
    if view.skipped is not None:
        entries.append(Entry(view.skipped.ts, "no action", view.skipped.reason))
    plans = {(p.plan_id, p.job): p for p in view.plans}
    for p in view.plans:
        entries.append(Entry(p.ts, "plan issued", f"{p.kind} plan {p.plan_id}: {p.job} generation "
                                                  f"{p.generation} {_nodes(p.previous)} → {_nodes(p.nodes)}"))
    for out in view.outcomes:
        plan = plans[(out.plan_id, out.job)]
        if isinstance(out, RecoveryFailed):
            then = f" → escalated to {out.escalation}" if out.escalation else ""
            entries.append(Entry(out.ts, "recovery failed", f"plan {out.plan_id}: {out.reason}{then}"))
        elif plan.nodes:
            entries.append(Entry(out.ts, "acknowledged", f"plan {out.plan_id}: every command of {out.job} "
                                 f"generation {out.generation} done ({_acked(plan)})"))
        else:
            entries.append(Entry(out.ts, "queued", f"plan {out.plan_id}: {out.job} stopped on every node, "
                                                   "waiting for nodes"))
    for r in view.resumed:
        entries.append(Entry(r.ts, "resumed", f"{r.job} generation {r.generation}: first step completed"))
    for r in view.restores:
        entries.append(Entry(r.ts, "restored", r.describe()))
    for w in view.restore_warnings:
        entries.append(Entry(w.ts, "RESTORE FELL BACK", f"{w.job} generation {w.generation} rank {w.rank} "
                                                        f"on {w.node}: {w.restore_warning}"))
    if view.resolved is not None:
        entries.append(Entry(view.resolved.ts, "resolved", f"after {view.time_to_resolve_s:.3f}s"))
    order = {w: i for i, w in enumerate(ORDER)}
    return sorted(entries, key=lambda e: (e.ts, order[e.what]))
