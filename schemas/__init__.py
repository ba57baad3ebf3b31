"""The event contract of trainmedic (EVENTS.md, v1): pydantic models, topics, JSON codec.

Depends on nothing else in the project.
"""

from trainmedic.schemas.alerts import AlertDelivered
from trainmedic.schemas.base import CONTRACT_VERSION, Event, Model, NodeEvent
from trainmedic.schemas.codec import InvalidEvent, decode, decode_telemetry, encode
from trainmedic.schemas.commands import (
    AckStatus,
    Command,
    CommandAcked,
    CommandAction,
    NodeJoined,
    NodeKeyRotated,
    NodeLeaving,
    NodeRegistered,
    NodeReport,
    RanksFinished,
    RestoreSource,
    WorkerSpec,
)
from trainmedic.schemas.dlq import DeadLettered
from trainmedic.schemas.incident import Action, Incident, IncidentStatus, Severity
from trainmedic.schemas.jobs import (
    FailureSettings,
    JobEvent,
    JobSpec,
    JobStopRequested,
    JobSubmitted,
    RestartPolicy,
)
from trainmedic.schemas.nodes import (
    HostJoin,
    NodeCordoned,
    NodeDrained,
    NodeEnrolled,
    NodeLifecycle,
    NodeReadmitted,
    NodeRemoved,
    NodeUncordoned,
    PublicKey,
    RoleKey,
)
from trainmedic.schemas.plan import ClusterNode, PlannedJob, PlanRequest, RecoveryPlan
from trainmedic.schemas.recovery import (
    JobEnded,
    RecoveryCompleted,
    RecoveryFailed,
    RecoveryKind,
    RecoveryLog,
    RecoveryPlanned,
    RecoverySkipped,
)
from trainmedic.schemas.telemetry import (
    GpuSample,
    LinkState,
    NodeHeartbeat,
    Restored,
    Telemetry,
    WorkerEvent,
    WorkerExited,
    WorkerFailed,
    WorkerStarted,
    WorkerStepped,
)
from trainmedic.schemas.topics import DEFAULT_PREFIX, SPECS, Topics, TopicSpec, adapter

__all__ = [
    "CONTRACT_VERSION", "DEFAULT_PREFIX", "SPECS", "AckStatus", "Action", "AlertDelivered", "ClusterNode",
    "Command", "CommandAcked", "CommandAction", "DeadLettered", "Event", "FailureSettings", "GpuSample",
    "Incident", "IncidentStatus", "InvalidEvent", "JobEnded", "JobEvent", "JobSpec", "JobStopRequested",
    "HostJoin", "JobSubmitted",
    "LinkState",
    "Model", "NodeCordoned", "NodeDrained", "NodeEvent", "NodeHeartbeat", "NodeLifecycle", "NodeReadmitted",
    "NodeEnrolled", "NodeJoined", "NodeKeyRotated", "NodeLeaving", "NodeRegistered", "NodeRemoved",
    "NodeReport",
    "NodeUncordoned", "PublicKey", "PlanRequest", "PlannedJob", "RanksFinished", "RoleKey",
    "RecoveryCompleted",
    "RecoveryFailed", "RecoveryKind", "RecoveryLog", "RecoveryPlan", "RecoveryPlanned", "RecoverySkipped",
    "RestartPolicy", "Restored", "RestoreSource", "Severity", "Telemetry", "TopicSpec", "Topics",
    "WorkerEvent",
    "WorkerExited", "WorkerFailed", "WorkerSpec", "WorkerStarted", "WorkerStepped",
    "adapter", "decode", "decode_telemetry", "encode",
]
