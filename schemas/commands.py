"""What the coordinator asks of a node (commands) and what the node answers (acks).

First version, refined by the coordinator and executor issues.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from schemas.base import Model, NodeEvent


class CommandAction(StrEnum):
    START = "start"
    STOP = "stop"
    RESTART = "restart"
    REATTEMPT = "reattempt"


class RestoreSource(Model):
    """Where a restarting rank takes its state from: a live replica, a checkpoint, or nothing."""

    kind: Literal["replica", "checkpoint", "none"] = "none"
    rank: int | None = Field(default=None, ge=0)
    node: str | None = None
    path: str | None = None


class WorkerSpec(Model):
    """The ranks one node runs for a job at one generation, and how to launch and restore them.

    `command` and `checkpoint_dir` are copied from the job spec so that an executor can
    launch ranks without asking the job registry; `LOCAL_RANK` is a rank's index in `ranks`;
    `restore` naming the node itself means the ranks keep their own state.
    """

    ranks: tuple[int, ...]
    world_size: int = Field(ge=1)
    master_addr: str
    master_port: int = Field(ge=1, le=65535)
    restore: RestoreSource = RestoreSource()
    command: tuple[str, ...] = Field(default=(), description="argv that launches one rank")
    checkpoint_dir: str | None = None

    @model_validator(mode="after")
    def _ranks_fit(self) -> WorkerSpec:
        if len(set(self.ranks)) != len(self.ranks):
            raise ValueError("ranks lists a rank twice")
        if any(rank < 0 or rank >= self.world_size for rank in self.ranks):
            raise ValueError(f"every rank must be in [0, world_size={self.world_size})")
        return self


class Command(NodeEvent):
    """A signed instruction to the executor on `node`; `generation` is the fencing token."""

    type: Literal["command"] = "command"
    id: str = Field(min_length=1)
    plan_id: str | None = None
    incident_id: str | None = None
    job: str = Field(min_length=1)
    generation: int = Field(ge=0)
    action: CommandAction
    worker: WorkerSpec | None = None
    signature: str | None = None


class AckStatus(StrEnum):
    ACCEPTED = "accepted"
    DONE = "done"
    FAILED = "failed"
    REFUSED = "refused"


class CommandAcked(NodeEvent):
    """An executor's answer to one command; `reason` says why it failed or was refused."""

    type: Literal["ack"] = "ack"
    command_id: str = Field(min_length=1)
    job: str
    generation: int = Field(ge=0)
    status: AckStatus
    reason: str | None = None
    elapsed_s: float | None = Field(default=None, ge=0)
