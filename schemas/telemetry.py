"""Telemetry events (EVENTS.md, "Telemetry"): what producers observe about GPUs, hosts, ranks."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from schemas.base import Model, NodeEvent


class GpuSample(NodeEvent):
    """One sample of one GPU. Counters are cumulative since driver load."""

    type: Literal["gpu_sample"] = "gpu_sample"
    gpu: int = Field(ge=0)
    uuid: str | None = None
    util: float | None = None
    mem_used_mb: float | None = None
    mem_total_mb: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    ecc_sbe: int | None = Field(default=None, ge=0)
    ecc_dbe: int | None = Field(default=None, ge=0)
    nvlink_errors: int | None = Field(default=None, ge=0)
    xids: tuple[int, ...] = ()
    throttle: tuple[str, ...] = ()


class LinkState(Model):
    """State of one data-plane NIC."""

    name: str
    up: bool


class NodeHeartbeat(NodeEvent):
    """A host says it is alive and promises the next heartbeat within `interval` seconds."""

    type: Literal["node_heartbeat"] = "node_heartbeat"
    interval: float = Field(gt=0)
    links: tuple[LinkState, ...] = ()


class WorkerEvent(NodeEvent):
    """An event about one rank of a job; `node` is the host the rank runs on."""

    job: str = Field(min_length=1)
    rank: int = Field(ge=0)
    world_size: int = Field(ge=1)
    generation: int = Field(default=0, ge=0)
    pid: int | None = None


class WorkerStarted(WorkerEvent):
    """The rank process has joined its process group."""

    type: Literal["worker_start"] = "worker_start"


class WorkerStepped(WorkerEvent):
    """The rank finished a training step. `restore_warning` (optional, on the first step after a
    restore) says that the restore could not use the replica its source named and fell back to an
    older state (a checkpoint, or nothing): steps were lost."""

    type: Literal["worker_step"] = "worker_step"
    step: int = Field(ge=0)
    step_time: float = Field(ge=0)
    restore_warning: str | None = None


class WorkerFailed(WorkerEvent):
    """An exception escaped the training step: `error` is "ExceptionType: message"."""

    type: Literal["worker_error"] = "worker_error"
    error: str


class WorkerExited(WorkerEvent):
    """The rank process ended (reported by the executor that supervises it)."""

    type: Literal["worker_exit"] = "worker_exit"
    exit_code: int | None = None
    signal: int | None = None


WorkerTelemetry = Annotated[
    WorkerStarted | WorkerStepped | WorkerFailed | WorkerExited, Field(discriminator="type")
]
Telemetry = Annotated[
    GpuSample | NodeHeartbeat | WorkerStarted | WorkerStepped | WorkerFailed | WorkerExited,
    Field(discriminator="type"),
]
