"""Upgrading a log an older coordinator wrote: its decisions copied from `incidents` and `nodes` to
`recovery`, once (docs/coordinator.md, "Upgrading from a coordinator that wrote to incidents and
nodes"; the history is on `migrate`); and decisions written before they named the nodes they isolate,
upcast as they are folded (`ImplicitIsolations`), so the pure fold knows only the current form.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable

from trainmedic.bus.message import RawMessage, parse_message
from trainmedic.bus.reader import NOW, TopicReader
from trainmedic.bus.settings import KafkaSettings
from trainmedic.bus.transactional import TransactionalProducer
from trainmedic.recovery.coordinator.core.fold import apply, isolate
from trainmedic.recovery.coordinator.core.state import ClusterState
from trainmedic.schemas import (
    DeadLettered,
    Incident,
    IncidentStatus,
    RecoveryKind,
    RecoveryPlanned,
    RecoverySkipped,
    Severity,
    Topics,
)
from trainmedic.schemas.topics import KINDS

log = logging.getLogger("trainmedic.coordinator")


class AlreadyMigrated(RuntimeError):
    """The recovery topic holds records: a migration ran, or a new coordinator did."""


def legacy(topics: Topics, messages: Iterable[RawMessage]) -> list[tuple[RawMessage, str]]:
    """Of `messages` read from incidents and nodes, those an old coordinator wrote there, with their
    kind: valid on the recovery topic, and not a kind their own topic carries."""
    out = []
    for msg in messages:
        spec = topics.spec_of(msg.topic)
        if spec is None or spec.suffix not in ("incidents", "nodes"):
            continue
        parsed = parse_message(topics, topics.recovery, msg.partition, msg.offset, msg.key, msg.value, 0.0)
        if not isinstance(parsed, DeadLettered) and parsed.event.type not in KINDS[spec.suffix]:
            out.append((msg, parsed.event.type))
    return out


def migrate(settings: KafkaSettings, timeout_s: float = 30.0) -> Counter[tuple[str, str]]:
    """Copy the old coordinator's records to `recovery`; (source topic, kind) -> how many. Raises
    AlreadyMigrated when `recovery` is not empty (nothing is copied then).

    A coordinator older than the `recovery` topic wrote its decisions (plans, outcomes, skips) to
    `incidents` and its re-admissions to `nodes`; the coordinator now folds them only from
    `recovery` and refuses them elsewhere, since records there cannot be told from forgeries. So
    the operator, who knows the old log is the old coordinator's, copies them once, every
    coordinator stopped (`trainmedic coordinator --migrate-lifecycle`): byte for byte with their
    keys, in each partition's order, in one transaction under the coordinator's transactional id,
    which also fences a coordinator still writing."""
    topics = settings.topics
    with TopicReader(settings, [topics.recovery], end=NOW, timeout_s=timeout_s) as reader:
        held = sum(len(batch) for batch in reader.batches())
    if held:
        raise AlreadyMigrated(f"{topics.recovery} already holds {held} records: migrated before, or a "
                              f"coordinator of this version has run; nothing copied")
    with TopicReader(settings, [topics.incidents, topics.nodes], end=NOW, timeout_s=timeout_s) as reader:
        found = legacy(topics, (msg for batch in reader.batches() for msg in batch))
    copied: Counter[tuple[str, str]] = Counter()
    if not found:
        return copied
    producer = TransactionalProducer(settings, transactional_id=topics.owned("coordinator"))
    try:
        producer.init()
        with producer.transaction():
            for msg, kind in found:
                producer.send(topics.recovery, msg.value, key=msg.key)
                copied[(msg.topic, kind)] += 1
    finally:
        producer.close()
    log.info("copied %d records of an older coordinator to %s", len(found), topics.recovery)
    return copied


class ImplicitIsolations:
    """The fold of a log written before decisions named the nodes they isolate: there a decision with
    no `isolated` (a skip, or a reconfigure plan) that answered a SEV1 incident of a node isolated that
    node, at the incident's time. It remembers which incidents such decisions answered, since a
    rebuild may read the incident before or after the decision (another topic)."""

    def __init__(self) -> None:
        self._answered: set[str] = set()

    def apply(self, state: ClusterState, event: object, arrived: float | None = None) -> ClusterState:
        """`fold.apply`, then the isolation an old decision implied, once both it and its incident are in."""
        known = state.incidents.get(event.id) if isinstance(event, Incident) else None
        apply(state, event, arrived)
        if (answered := _answered_implicitly(event)) is not None:
            self._answered.add(answered)
        elif (isinstance(event, Incident) and event.status is IncidentStatus.OPEN
              and (known is None or known.status is not IncidentStatus.RESOLVED)):
            answered = event.id  # as the fold read an incident: while it is open, never once resolved
        else:
            return state
        incident = state.incidents.get(answered) if answered in self._answered else None
        if incident is not None and incident.severity is Severity.SEV1 and incident.node is not None:
            isolate(state, {incident.node: incident.id}, incident.ts)
        return state


def _answered_implicitly(event: object) -> str | None:
    """The incident an old decision answered without saying what it isolates, or None."""
    if isinstance(event, RecoverySkipped) or (isinstance(event, RecoveryPlanned)
                                              and event.kind is RecoveryKind.RECONFIGURE):
        return event.incident_id if event.isolated is None else None
    return None
