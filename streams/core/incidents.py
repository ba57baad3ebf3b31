"""Opening, annotating and resolving incidents: the only place Incident events are made. An incident is
opened or resolved no earlier than event time had come to when the detector decided it: evidence that
arrives late (held by its producer through a partition, from a host whose clock is behind) is dated by
its own clock in the evidence, but never moves an incident's time back before what was already known,
so an incident's timeline reads in the order things were learned (issue 44). What job reports raise is
rate-limited here (limits.py): an incident a storm holds is kept and followed, not emitted while held;
when the storm is over it is released (emitted open) if still open and its job still followed."""

from __future__ import annotations

from collections.abc import Iterable

from trainmedic.schemas.incident import Incident, IncidentStatus, Progress, Severity
from trainmedic.streams.core.config import DetectorConfig
from trainmedic.streams.core.deadlines import Deadlines
from trainmedic.streams.core.escalation import escalate
from trainmedic.streams.core.ids import incident_id
from trainmedic.streams.core.limits import Limits
from trainmedic.streams.core.state import DetectorState, OpenIncident
from trainmedic.streams.core.taxonomy import CATEGORIES, Source


class IncidentBook:
    """Keeps open incidents in the state and collects the Incident events to emit."""

    def __init__(self, state: DetectorState, config: DetectorConfig, timers: Deadlines) -> None:
        self.state = state
        self.config = config
        self.out: list[Incident] = []
        self.limits = Limits(state, config, self, timers)

    def take(self) -> list[Incident]:
        out = self.out
        if out:
            self.out = []
        return out

    def open(
        self, category: str, *, key: str, root_ts: float, ts: float, first_ts: float,
        job: str | None = None, node: str | None = None, ranks: Iterable[int] = (),
        evidence: Iterable[str] = (), dropped: int = 0, jobs: dict[str, int] | None = None,
        step: int = -1, gpu: int | None = None, nic: str | None = None,
        signature: str | None = None, counts_node: bool = True,
    ) -> OpenIncident:
        """Open (and emit) an incident; the id hashes category, scope, key and root_ts.
        `signature` (what the failure looks like) tells a job's repeat from a node's;
        `counts_node` False: it counts against no node in escalation (it still names it).
        One from job reports past its limits is suppressed: kept, not escalated, not emitted until
        released (limits.py)."""
        scope = job or node or "-"
        ts = max(ts, self.state.clock)
        iid = incident_id(category, scope, key, root_ts)
        known = self.state.incidents.get(iid)
        if known is not None:
            return known
        kind = CATEGORIES[category]
        held = kind.source is Source.JOB and not self.limits.admit(iid, category, job, node, ts)
        severity, why = (kind.severity, []) if held else escalate(
            self.config.escalation, self.state, category, kind.severity,
            scope=scope, node=node if counts_node else None, job=job, signature=signature, ts=ts)
        rec = OpenIncident(
            id=iid, category=category, severity=severity.value, job=job, node=node,
            ranks=sorted(ranks), first_ts=min(first_ts, ts), ts=ts, evidence=[],
            dropped=dropped, jobs=dict(jobs or {}), step=step, gpu=gpu, nic=nic, suppressed=held)
        if kind.source is not Source.DETECTOR:  # a storm is no job's failure: no progress
            self._progress(rec, job)
        self.note(rec, evidence)
        self.note(rec, why)
        self.state.incidents[iid] = rec
        self._emit(rec, IncidentStatus.OPEN, ts)
        return rec

    def _progress(self, rec: OpenIncident, job: str | None) -> None:
        """Note how far the job's current generation got: its steps and when the first one was."""
        watch = self.state.jobs.get(job) if job is not None else None
        if watch is not None:
            rec.steps, rec.stepping_since = watch.steps_seen, watch.first_step_ts

    def note(self, rec: OpenIncident, lines: Iterable[str]) -> None:
        """Add evidence lines, keeping at most `correlation.evidence_lines` (the rest counted)."""
        cap = self.config.correlation.evidence_lines
        for line in lines:
            if len(rec.evidence) < cap:
                rec.evidence.append(line)
            else:
                rec.dropped += 1

    def resolve(self, rec: OpenIncident, ts: float, why: str) -> None:
        """Close an open incident (same id, status resolved) with the evidence gathered since."""
        if self.state.incidents.pop(rec.id, None) is None:
            return
        ts = max(ts, self.state.clock, rec.ts)
        if len(rec.evidence) >= self.config.correlation.evidence_lines:
            rec.evidence.pop()
            rec.dropped += 1
        rec.evidence.append(f"{ts:.3f} resolved: {why}")
        self._emit(rec, IncidentStatus.RESOLVED, ts)

    def release(self, rec: OpenIncident, ts: float, why: str) -> None:
        """A suppressed incident no storm holds any more (limits.py): emitted open now, with the evidence
        it gathered while held. It escalates nothing (as when it was suppressed)."""
        if not rec.suppressed or self.state.incidents.get(rec.id) is not rec:
            return
        rec.suppressed = False
        rec.ts = ts = max(ts, self.state.clock, rec.ts)
        if len(rec.evidence) >= self.config.correlation.evidence_lines:
            rec.evidence.pop()
            rec.dropped += 1
        rec.evidence.append(why)
        self._emit(rec, IncidentStatus.OPEN, ts)

    def get(self, iid: str | None) -> OpenIncident | None:
        return None if iid is None else self.state.incidents.get(iid)

    def _emit(self, rec: OpenIncident, status: IncidentStatus, ts: float) -> None:
        if rec.suppressed:
            return
        severity = Severity(rec.severity)
        evidence = list(rec.evidence)
        if rec.dropped:
            evidence.append(f"... and {rec.dropped} more")
        self.out.append(Incident(
            ts=ts, id=rec.id, status=status, category=rec.category, severity=severity,
            action=CATEGORIES[rec.category].action_at(severity), job=rec.job, node=rec.node,
            ranks=tuple(rec.ranks),
            first_ts=rec.first_ts, evidence=tuple(evidence),
            progress=None if rec.steps is None else Progress(steps=rec.steps, since=rec.stepping_since)))
