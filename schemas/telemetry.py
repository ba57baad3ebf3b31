"""Telemetry events (EVENTS.md, "Telemetry"): what producers observe about GPUs, hosts, ranks."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from trainmedic.schemas.base import Model, NodeEvent
from trainmedic.schemas.bounds import (
    MAX_ID,
    MAX_INT,
    MAX_SMALL_ITEMS,
    MAX_TS,
    Count,
    Finite,
    Id,
    Int64,
    Name,
    Seconds,
    Text,
)


class GpuSample(NodeEvent):
    """One sample of one GPU. Counters are cumulative since driver load."""

    type: Literal["gpu_sample"] = "gpu_sample"
    gpu: Count
    uuid: str | None = Field(default=None, max_length=MAX_ID)
    util: Finite | None = None
    mem_used_mb: Finite | None = None
    mem_total_mb: Finite | None = None
    temp_c: Finite | None = None
    power_w: Finite | None = None
    ecc_sbe: Count | None = None
    ecc_dbe: Count | None = None
    nvlink_errors: Count | None = None
    xids: tuple[Int64, ...] = Field(default=(), max_length=MAX_SMALL_ITEMS)
    throttle: tuple[Annotated[str, Field(max_length=MAX_ID)], ...] = Field(default=(),
                                                                      max_length=MAX_SMALL_ITEMS)


class LinkState(Model):
    """State of one data-plane NIC."""

    name: Name
    up: bool


class NodeHeartbeat(NodeEvent):
    """A host says it is alive and promises the next heartbeat within `interval` seconds."""

    type: Literal["node_heartbeat"] = "node_heartbeat"
    interval: float = Field(gt=0, le=MAX_TS)
    links: tuple[LinkState, ...] = Field(default=(), max_length=MAX_SMALL_ITEMS)
    leaving: bool = Field(default=False, description="the host's last heartbeat before a planned shutdown: "
                          "the silence that follows is not a fault")


class WorkerEvent(NodeEvent):
    """An event about one rank of a job; `node` is the host the rank runs on."""

    job: Id
    rank: Count
    world_size: int = Field(ge=1, le=MAX_INT)
    generation: Count = 0
    pid: Int64 | None = None


class WorkerStarted(WorkerEvent):
    """The rank process has joined its process group."""

    type: Literal["worker_start"] = "worker_start"
    hang_floor_s: Seconds | None = Field(
        default=None, description="the job spec's failure.hang_floor_s, which the detector uses")


class Restored(Model):
    """Where a rank's state came from when it (re)started: `kind` "replica" (node-local snapshots)
    or "checkpoint", the `step` it holds, and how long the restore took. Restored from a sharded
    model's snapshots: the elements of its shards it read on its own node (`read`) and got sent
    from other nodes (`received`); None otherwise. A step retried in place (`resync`) is not
    reported."""

    kind: Literal["replica", "checkpoint"]
    step: Count
    seconds: Seconds
    read: Count | None = None
    received: Count | None = None


class WorkerStepped(WorkerEvent):
    """The rank finished a training step. On the first step after a restore, `restored` (optional)
    says where its state came from, and `restore_warning` (optional) that the restore could not use
    the replica its source named and fell back to an older state (a checkpoint, or nothing): steps
    were lost."""

    type: Literal["worker_step"] = "worker_step"
    step: Count
    step_time: Seconds
    restore_warning: Text | None = None
    restored: Restored | None = None


class WorkerFailed(WorkerEvent):
    """An exception escaped the training step: `error` is "ExceptionType: message"."""

    type: Literal["worker_error"] = "worker_error"
    error: Text


class WorkerExited(WorkerEvent):
    """The rank process ended (reported by the executor that supervises it). Neither `exit_code`
    nor `signal`, with a `reason`, means the exit status is unknown (a rank the executor adopted
    after its own restart, or one that ended while no executor watched)."""

    type: Literal["worker_exit"] = "worker_exit"
    exit_code: Int64 | None = None
    signal: Int64 | None = None
    reason: Text | None = None
    stopped: bool = Field(default=False, description="the executor stopped it on a command (a planned "
                          "stop of a re-plan, not a failure); absent (false) from older executors")

    @property
    def status_unknown(self) -> bool:
        return self.exit_code is None and self.signal is None and self.reason is not None


WorkerTelemetry = Annotated[
    WorkerStarted | WorkerStepped | WorkerFailed | WorkerExited, Field(discriminator="type")
]
Telemetry = Annotated[
    GpuSample | NodeHeartbeat | WorkerStarted | WorkerStepped | WorkerFailed | WorkerExited,
    Field(discriminator="type"),
]
