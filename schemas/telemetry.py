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

# The bound of a rank's last output in `worker_exit` and of a traceback in `worker_error`: its last
# lines, at most this many characters and lines (the executor and the hook cut to it).
MAX_TAIL_CHARS = 4_096
MAX_TAIL_LINES = 40
# The bound of a worker event's `placement`: the coordinator's signed placement as JSON (its ranks on
# one node: a few hundred bytes, at most 4,096 ranks).
MAX_PLACEMENT = 65_536


def last_lines(text: str, max_lines: int = MAX_TAIL_LINES, max_chars: int = MAX_TAIL_CHARS) -> str:
    """The end of `text` within the bound: its last `max_lines` lines, then its last `max_chars`
    characters (from a line's start where the cut leaves one)."""
    kept = "\n".join(text.rstrip("\n").split("\n")[-max_lines:])
    if len(kept) <= max_chars:
        return kept
    cut = kept[-max_chars:]
    newline = cut.find("\n")
    return cut[newline + 1:] if 0 <= newline < len(cut) - 1 else cut


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


def placement_field() -> object:
    """`placement`, as the events that announce a generation carry it."""
    return Field(default=None, max_length=MAX_PLACEMENT, description="the coordinator-signed placement "
                 "(a `placement` record as JSON: job, generation, node, ranks) of this rank's generation on "
                 "its node, stamped by the executor from its start or restart command: the detector moves a "
                 "job to a generation only on one (docs/detection.md, \"Generations come from the "
                 "coordinator\"); absent from older executors, and for ranks adopted without it")


class WorkerStarted(WorkerEvent):
    """The rank process has joined its process group."""

    type: Literal["worker_start"] = "worker_start"
    hang_floor_s: Seconds | None = Field(
        default=None, description="the job spec's failure.hang_floor_s, which the detector uses")
    placement: str | None = placement_field()


class WorkerWaiting(WorkerEvent):
    """A peer's failure broke the rank's process group and it waits, alive, to re-form it at the next
    generation (`Runtime.run`). Only for its executor, which may then keep the process instead of
    starting a new one; never on Kafka."""

    type: Literal["worker_waiting"] = "worker_waiting"


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
    traceback: Text | None = Field(
        default=None, description="the exception's formatted traceback, its last lines (bounded by "
        "MAX_TAIL_CHARS and MAX_TAIL_LINES); the rank's own text: render it escaped; absent from older hooks")


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
    output_tail: Text | None = Field(
        default=None, description="the last lines the rank wrote before an exit that was neither clean "
        "nor a stop, from its last traceback line on where there is one (bounded by MAX_TAIL_CHARS and "
        "MAX_TAIL_LINES); the rank's own text: render it escaped; absent from older executors and for "
        "ranks whose output the executor does not know")
    placement: str | None = placement_field()

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
