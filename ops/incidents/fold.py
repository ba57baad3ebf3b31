"""The fold of the incident log (the detector's `incidents`, the coordinator's `recovery`, the steps of
telemetry.worker): facts keyed by their identity, so any order gives the same state
(docs/coordinator.md#the-fold)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from trainmedic.schemas import encode
from trainmedic.schemas.incident import Incident
from trainmedic.schemas.recovery import RecoveryCompleted, RecoveryFailed, RecoveryPlanned, RecoverySkipped
from trainmedic.schemas.telemetry import WorkerExited, WorkerStarted, WorkerStepped

Outcome = RecoveryCompleted | RecoveryFailed


@dataclass
class IncidentHistory:
    """Everything the incident log said about incidents and their recovery, by identity.

    Incidents are keyed by job or node and lifecycle events by job, on two topics, so an incident and
    the plan that answers it arrive in either order. Each fact is stored under its own identity
    (of two versions, the one that sorts first): folding twice, or in any interleaving, gives equal
    states. It also keeps when each generation of a job stepped (when a recovery resumed training),
    the steps that report a restore fallback, and when each incident event reached Kafka (its
    message time, later than its `ts` by however long the detector took to publish it)."""

    incidents: dict[tuple[str, str], Incident] = field(default_factory=dict)  # (id, status)
    plans: dict[tuple[str, str], RecoveryPlanned] = field(default_factory=dict)  # (plan_id, job)
    outcomes: dict[tuple[str, str], Outcome] = field(default_factory=dict)  # (plan_id, job)
    skips: dict[str, RecoverySkipped] = field(default_factory=dict)  # incident id
    # worker steps that say their restore fell back from its replica: (job, generation, rank)
    restore_warnings: dict[tuple[str, int, int], WorkerStepped] = field(default_factory=dict)
    # worker steps that say where their rank's restored state came from: (job, generation, rank)
    restores: dict[tuple[str, int, int], WorkerStepped] = field(default_factory=dict)
    # when a step of each (job, generation) completed, by any rank (the `ts` of its worker_step)
    steps: dict[tuple[str, int], set[float]] = field(default_factory=dict)
    published: dict[tuple[str, str], float] = field(default_factory=dict)  # (id, status) -> first on Kafka
    # when each rank of a (job, generation) joined its process group (worker_start), and when its
    # executor stopped one on a command (worker_exit, stopped): the phases of a recovery (phases.py)
    joined: dict[tuple[str, int], set[float]] = field(default_factory=dict)
    stopped: dict[tuple[str, int], set[float]] = field(default_factory=dict)

    def statuses(self, incident_id: str) -> dict[str, Incident]:
        """The open and resolved events of one incident, those that were seen."""
        return {status: event for (iid, status), event in self.incidents.items() if iid == incident_id}


def _first(known, new):
    """Of two versions of one fact, the one that sorts first by (ts, bytes): independent of order."""
    if known is None or (new.ts, encode(new)) < (known.ts, encode(known)):
        return new
    return known


def apply(history: IncidentHistory, event: object, published: float | None = None) -> IncidentHistory:
    """Fold one event into `history` (in place, returned); `published` is its Kafka message time
    where the reader knows it. Events of other types change nothing."""
    match event:
        case Incident():
            key = (event.id, str(event.status))
            history.incidents[key] = _first(history.incidents.get(key), event)
            if published is not None:
                history.published[key] = min(published, history.published.get(key, published))
        case RecoveryPlanned():
            key = (event.plan_id, event.job)
            history.plans[key] = _first(history.plans.get(key), event)
        case RecoveryCompleted() | RecoveryFailed():
            key = (event.plan_id, event.job)
            history.outcomes[key] = _first(history.outcomes.get(key), event)
        case RecoverySkipped() if event.incident_id is not None:
            history.skips[event.incident_id] = _first(history.skips.get(event.incident_id), event)
        case WorkerStarted():
            history.joined.setdefault((event.job, event.generation), set()).add(event.ts)
        case WorkerExited(stopped=True):
            history.stopped.setdefault((event.job, event.generation), set()).add(event.ts)
        case WorkerStepped():
            history.steps.setdefault((event.job, event.generation), set()).add(event.ts)
            key = (event.job, event.generation, event.rank)
            if event.restore_warning:
                history.restore_warnings[key] = _first(history.restore_warnings.get(key), event)
            if event.restored is not None:
                history.restores[key] = _first(history.restores.get(key), event)
    return history


def fold(events: Iterable[object], history: IncidentHistory | None = None) -> IncidentHistory:
    """The state after every event, starting from `history` (or empty)."""
    history = history if history is not None else IncidentHistory()
    for event in events:
        apply(history, event)
    return history
