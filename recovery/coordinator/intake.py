"""Records into the coordinator's state, one at a time, never raising: what cannot be applied is
refused with the reason, for the dlq, and the next record goes on (docs/coordinator.md, "The fold").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from trainmedic.bus.message import Record
from trainmedic.recovery.coordinator.core.config import CoordinatorConfig
from trainmedic.recovery.coordinator.core.state import ClusterState, Rejected
from trainmedic.recovery.coordinator.core.steps import react
from trainmedic.recovery.coordinator.migrate import ImplicitIsolations
from trainmedic.schemas import Topics

log = logging.getLogger(__name__)


def arrival(record: Record, topics: Topics, now: float | None) -> float | None:
    """When the coordinator received `record`: the broker's append time on a topic the broker stamps
    (LogAppendTime; never later than `now`), else `now`, its own clock as it reads the record (None on
    a rebuild: an incident's own `ts` stands in then). Never the clock of the host that wrote it."""
    spec = topics.spec_of(record.topic)
    if spec is not None and spec.broker_time and record.timestamp_ms is not None:
        stamp = record.timestamp_ms / 1000
        return stamp if now is None else min(stamp, now)
    return now


def rebuild(state: ClusterState, records: Iterable[Record], upcast: ImplicitIsolations | None = None,
            arrived: Callable[[Record], float | None] | None = None) -> list[tuple[Record, str]]:
    """Fold every record into `state`; returns those that did not apply, with the reason. A record
    can be valid and still not apply (a `recovery_planned` whose move the job's state table forbids,
    from a corrupt or foreign log, raises IllegalTransition in the fold); the topics are kept
    forever, so a coordinator that raised on it would raise again on every restart. Decisions of a log
    older than `isolated` are upcast here (`ImplicitIsolations`): such a log reaches a coordinator of
    this version only through `--migrate-lifecycle`, with every coordinator stopped, so a rebuild is
    where it is read. A caller that rebuilds in parts (a reader's polls) passes one `upcast` to all.
    `arrived` says when each record was received (`arrival`), if anything does.
    """
    refused = []
    fold = upcast or ImplicitIsolations()
    for record in records:
        try:
            fold.apply(state, record.event, None if arrived is None else arrived(record))
        except Exception as err:  # a bug or a corrupt log: one record, never the whole rebuild
            refused.append((record, _reason(err)))
    return refused


class _LogOnly(ClusterState):
    """The log as written, for a listing made without the coordinator's config: every node counts."""

    def in_cluster(self, node_id: str) -> bool:
        return True


def log_state(config: CoordinatorConfig | None) -> ClusterState:
    """An empty state for a CLI to fold into; without the coordinator's `config`, every node the log
    names is in the cluster."""
    return ClusterState.initial(config) if config is not None else _LogOnly.initial(CoordinatorConfig())


def listing(records: Iterable[Record], config: CoordinatorConfig | None, jobs_topic: str) -> ClusterState:
    """The state a CLI shows: `records` folded as the coordinator folds them (jobs first; what it
    refuses, skipped). Without the coordinator's `config`, every node the log names is in the cluster."""
    state = log_state(config)
    rebuild(state, sorted(records, key=lambda r: r.topic != jobs_topic))
    return state


def receive(state: ClusterState, record: Record, now: float, arrived: float | None = None) -> list | str:
    """What to publish for one live record (`react`; received at `arrived`, else `now`), or the reason
    it could not be applied."""
    try:
        return react(state, record.event, now, arrived)
    except Rejected as err:
        log.warning("%s[%d]@%d rejected: %s", record.topic, record.partition, record.offset, err)
        return _reason(err)
    except Exception as err:
        log.exception("%s[%d]@%d could not be applied", record.topic, record.partition, record.offset)
        return _reason(err)


def _reason(err: Exception) -> str:
    if isinstance(err, Rejected):
        return f"coordinator rejected it: {err}"
    return f"coordinator could not apply it: {type(err).__name__}: {err}"
