"""The event contract of trainmedic (EVENTS.md, v1): pydantic models, topics, JSON codec.

Depends on nothing else in the project.
"""

from schemas.alerts import AlertDelivered
from schemas.base import CONTRACT_VERSION, Event, Model, NodeEvent
from schemas.codec import InvalidEvent, decode, decode_telemetry, encode
from schemas.commands import (
    AckStatus,
    Command,
    CommandAcked,
    CommandAction,
    RestoreSource,
    WorkerSpec,
)
from schemas.dlq import DeadLettered
from schemas.incident import Action, Incident, IncidentStatus, Severity
from schemas.jobs import JobSpec, JobSubmitted
from schemas.nodes import NodeCordoned, NodeDrained, NodeLifecycle, NodeReadmitted, NodeUncordoned
from schemas.plan import ClusterNode, PlannedJob, PlanRequest, RecoveryPlan
from schemas.recovery import (
    RecoveryCompleted,
    RecoveryFailed,
    RecoveryKind,
    RecoveryLog,
    RecoveryPlanned,
    RecoverySkipped,
)
from schemas.telemetry import (
    GpuSample,
    LinkState,
    NodeHeartbeat,
    Telemetry,
    WorkerEvent,
    WorkerExited,
    WorkerFailed,
    WorkerStarted,
    WorkerStepped,
)
from schemas.topics import DEFAULT_PREFIX, SPECS, Topics, TopicSpec, adapter

__all__ = [
    "CONTRACT_VERSION", "DEFAULT_PREFIX", "SPECS", "AckStatus", "Action", "AlertDelivered", "ClusterNode",
    "Command", "CommandAcked", "CommandAction", "DeadLettered", "Event", "GpuSample",
    "Incident", "IncidentStatus", "InvalidEvent", "JobSpec", "JobSubmitted", "LinkState",
    "Model", "NodeCordoned", "NodeDrained", "NodeEvent", "NodeHeartbeat", "NodeLifecycle", "NodeReadmitted",
    "NodeUncordoned", "PlanRequest", "PlannedJob", "RecoveryCompleted",
    "RecoveryFailed", "RecoveryKind", "RecoveryLog", "RecoveryPlan", "RecoveryPlanned", "RecoverySkipped",
    "RestoreSource", "Severity", "Telemetry", "TopicSpec", "Topics", "WorkerEvent",
    "WorkerExited", "WorkerFailed", "WorkerSpec", "WorkerStarted", "WorkerStepped",
    "adapter", "decode", "decode_telemetry", "encode",
]
