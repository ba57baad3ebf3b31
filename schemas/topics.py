"""The topics of ARCHITECTURE.md: names (with a prefix), keys, retention, and what each carries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError

from trainmedic.schemas.alerts import AlertDelivered
from trainmedic.schemas.commands import Command, NodeReport
from trainmedic.schemas.dlq import DeadLettered
from trainmedic.schemas.incident import Incident
from trainmedic.schemas.jobs import JobEvent
from trainmedic.schemas.nodes import NodeLifecycle
from trainmedic.schemas.recovery import RecoveryLog
from trainmedic.schemas.telemetry import GpuSample, NodeHeartbeat, WorkerTelemetry

DEFAULT_PREFIX = "trainmedic."
DAY_MS = 24 * 3600 * 1000
FOREVER = -1


@dataclass(frozen=True)
class TopicSpec:
    """One topic: its name without prefix, what keys it, how long it keeps data, what it carries."""

    suffix: str
    key: str
    partitions: int
    retention_ms: int
    events: Any  # the type a value must validate as (one model, or a discriminated union)
    compact: bool = False
    broker_time: bool = False  # messages carry the broker's clock (LogAppendTime), not the producer's

    def config(self) -> dict[str, str]:
        """Broker-side topic configuration, as a topic is created."""
        config = {
            "cleanup.policy": "compact" if self.compact else "delete",
            "retention.ms": str(self.retention_ms),
        }
        return config | self.enforced()

    def enforced(self) -> dict[str, str]:
        """The part of `config` that a topic created before must be brought to (a security property,
        unlike retention, which operators tune)."""
        return {"message.timestamp.type": "LogAppendTime"} if self.broker_time else {}


SPECS: tuple[TopicSpec, ...] = (
    # Time is the broker's: a producer's own clock never stamps telemetry, so the detector can
    # bound every event's `ts` by when the broker took it (streams/event_time.py).
    TopicSpec("telemetry.gpu", "node", 12, 7 * DAY_MS, GpuSample, broker_time=True),
    TopicSpec("telemetry.node", "node", 6, 7 * DAY_MS, NodeHeartbeat, broker_time=True),
    TopicSpec("telemetry.worker", "job", 12, 7 * DAY_MS, WorkerTelemetry, broker_time=True),
    # The detector's incidents only; the coordinator's decisions, escalations and re-admissions are
    # on `recovery`, which only it writes: a broker ACL per topic then tells one writer from the other.
    TopicSpec("incidents", "job (or node)", 6, FOREVER, Incident),
    TopicSpec("recovery", "job (or node)", 6, FOREVER, RecoveryLog),
    # Stamped by the broker: a job older than the coordinator's freshness window at its append is
    # refused as a replay, whatever time its replayer claims (provenance.stale).
    TopicSpec("jobs", "job", 1, FOREVER, JobEvent, broker_time=True),
    # Node lifecycle: operators' cordon/drain/uncordon. One partition, so a node's events are read
    # in the order they were written.
    TopicSpec("nodes", "node", 1, FOREVER, NodeLifecycle),
    TopicSpec("commands", "node", 12, FOREVER, Command),
    # What executors report, each signed by its node: acks, a node joining or leaving, a job's ranks done.
    # The broker stamps them, so the coordinator can tell a node's clock that is far off.
    TopicSpec("acks", "node", 6, FOREVER, NodeReport, broker_time=True),
    TopicSpec("alerts", "incident id", 3, 30 * DAY_MS, AlertDelivered),
    TopicSpec("dlq", "source topic", 3, 30 * DAY_MS, DeadLettered),
)
BY_SUFFIX = {spec.suffix: spec for spec in SPECS}
# Services whose default names (consumer group, app id, their own topics) derive from the prefix.
OWNING_ROLES = ("detector", "alerts", "coordinator")


class Topics:
    """Full topic names under one prefix: `Topics("acme.").gpu == "acme.telemetry.gpu"`."""

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        self.prefix = prefix

    def name(self, suffix: str) -> str:
        if suffix not in BY_SUFFIX:
            raise KeyError(f"no topic {suffix!r}; known: {', '.join(BY_SUFFIX)}")
        return self.prefix + suffix

    def spec_of(self, topic: str) -> TopicSpec | None:
        """The spec of a full topic name, or None when the name is not one of ours."""
        if not topic.startswith(self.prefix):
            return None
        return BY_SUFFIX.get(topic[len(self.prefix):])

    def all(self) -> dict[str, TopicSpec]:
        return {self.prefix + spec.suffix: spec for spec in SPECS}

    def owned(self, role: str) -> str:
        """The default name (consumer group, app id, client id, stem of its own topics) that a
        deployment's `role` owns: under the prefix, so two deployments on one Kafka cluster never
        share one. `Topics("acme.").owned("detector") == "acme.detector"`."""
        return self.prefix + role

    def internal(self, names: set[str]) -> list[str]:
        """Of a broker's topic `names`, those a service of this deployment made for itself under a
        default name (the detector's checkpoints, a Faust engine's changelogs)."""
        stems = tuple(self.owned(role) + "-" for role in OWNING_ROLES)
        return sorted(name for name in names if name.startswith(stems))

    gpu = property(lambda self: self.name("telemetry.gpu"))
    node = property(lambda self: self.name("telemetry.node"))
    worker = property(lambda self: self.name("telemetry.worker"))
    incidents = property(lambda self: self.name("incidents"))
    recovery = property(lambda self: self.name("recovery"))
    jobs = property(lambda self: self.name("jobs"))
    nodes = property(lambda self: self.name("nodes"))
    commands = property(lambda self: self.name("commands"))
    acks = property(lambda self: self.name("acks"))
    alerts = property(lambda self: self.name("alerts"))
    dlq = property(lambda self: self.name("dlq"))


def _models(events: Any) -> tuple[type[BaseModel], ...]:
    """The event models a topic's type names: itself, or the members of its (annotated) union."""
    if isinstance(events, type):
        return (events,)
    if get_origin(events) is Annotated:
        return _models(get_args(events)[0])
    return tuple(model for member in get_args(events) for model in _models(member))


_ADAPTERS = {spec.suffix: TypeAdapter(spec.events) for spec in SPECS}
# topic suffix -> the `type` values its contract accepts
KINDS = {spec.suffix: frozenset(model.model_fields["type"].default for model in _models(spec.events))
         for spec in SPECS}


def adapter(suffix: str) -> TypeAdapter:
    """The validator of one topic's values."""
    return _ADAPTERS[suffix]


class _Typed(BaseModel):
    """Just the discriminator of an event (pydantic-core parses hostile JSON without raising more
    than a ValidationError: nesting is bounded)."""

    type: str


_TYPED = TypeAdapter(_Typed)


def misplaced(suffix: str, value: bytes | str | None) -> str | None:
    """Why `value`, read from topic `suffix`, is an event that only other topics carry (a
    `recovery_planned` on incidents, a `node_readmitted` on nodes); None when it is not one."""
    try:
        kind = _TYPED.validate_json(value or b"").type
    except (ValidationError, ValueError, TypeError):
        return None
    if kind in KINDS[suffix]:
        return None
    homes = [spec.suffix for spec in SPECS if kind in KINDS[spec.suffix]]
    if not homes:
        return None
    return f"a {kind} belongs on the {' or '.join(homes)} topic, never on {suffix}"
