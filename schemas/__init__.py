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
    NodeJoined,
    NodeLeaving,
    NodeReport,
    RanksFinished,
    RestoreSource,
    WorkerSpec,
)
from schemas.dlq import DeadLettered
from schemas.incident import Action, Incident, IncidentStatus, Severity
from schemas.jobs import FailureSettings, JobEvent, JobSpec, JobStopRequested, JobSubmitted, RestartPolicy
from schemas.nodes import NodeCordoned, NodeDrained, NodeLifecycle, NodeReadmitted, NodeUncordoned
from schemas.plan import ClusterNode, PlannedJob, PlanRequest, RecoveryPlan
from schemas.recovery import (
    JobEnded,
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
    Restored,
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
    "Command", "CommandAcked", "CommandAction", "DeadLettered", "Event", "FailureSettings", "GpuSample",
    "Incident", "IncidentStatus", "InvalidEvent", "JobEnded", "JobEvent", "JobSpec", "JobStopRequested",
    "JobSubmitted",
    "LinkState",
    "Model", "NodeCordoned", "NodeDrained", "NodeEvent", "NodeHeartbeat", "NodeLifecycle", "NodeReadmitted",
    "NodeJoined", "NodeLeaving", "NodeReport", "NodeUncordoned", "PlanRequest", "PlannedJob", "RanksFinished",
    "RecoveryCompleted",
    "RecoveryFailed", "RecoveryKind", "RecoveryLog", "RecoveryPlan", "RecoveryPlanned", "RecoverySkipped",
    "RestartPolicy", "Restored", "RestoreSource", "Severity", "Telemetry", "TopicSpec", "Topics",
    "WorkerEvent",
    "WorkerExited", "WorkerFailed", "WorkerSpec", "WorkerStarted", "WorkerStepped",
    "adapter", "decode", "decode_telemetry", "encode",
]
