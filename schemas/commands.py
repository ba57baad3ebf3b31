"""What the coordinator asks of a node (commands) and what the node answers (acks).

First version, refined by the coordinator and executor issues.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from trainmedic.schemas.base import Model, NodeEvent, Signed
from trainmedic.schemas.bounds import (
    MAX_ID,
    MAX_INT,
    MAX_ITEMS,
    MAX_SMALL_ITEMS,
    Count,
    Id,
    Name,
    ProcessText,
    Seconds,
    Text,
    Timestamp,
)
from trainmedic.schemas.jobs import EnvName, FailureSettings
from trainmedic.schemas.nodes import PublicKey

# 32 bytes in hex: the generation's rendezvous secret (docs/security.md, "The rendezvous")
RendezvousKey = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class CommandAction(StrEnum):
    """What a command asks of its node: the first four act on a job's ranks; `health_check` asks the
    node to run its probe and answer `done` (it passed) or `failed` (docs/executor.md, "The health
    check"). An executor older than `health_check` dead-letters such a command and never answers it."""

    START = "start"
    STOP = "stop"
    RESTART = "restart"
    REATTEMPT = "reattempt"
    HEALTH_CHECK = "health_check"


# The `job` of a health check, which concerns no job: never a job's id (those name a directory: no
# parentheses, no space), so no job's generation, ledger line or ranks are touched by one.
HEALTH_CHECK_JOB = "(health check)"


class RestoreSource(Model):
    """Where a restarting rank takes its state from: the snapshots on the job's nodes (`replica`,
    `node`'s first on a tie), its submission's checkpoint, or nothing. `rank` and `path` were set by
    earlier coordinators (the snapshot's writer, a checkpoint dir) and are no longer read."""

    kind: Literal["replica", "checkpoint", "none"] = "none"
    rank: Count | None = None
    node: Name | None = None
    path: ProcessText | None = None


class WorkerSpec(Model):
    """The ranks one node runs for a job at one generation, and how to launch and restore them.

    `command` (the job's command and args), `checkpoint_dir`, `resume`, `env`, `workdir` and
    `failure` are copied from the job spec so that an executor can
    launch ranks without asking the job registry; `LOCAL_RANK` is a rank's index in `ranks`;
    `restore` naming the node itself means the ranks keep their own state. `submission` names the
    job's submission: its ranks' files on a node, and its checkpoints, are that submission's alone
    (optional in v1; an executor refuses to launch ranks without it). `rendezvous_key` is the
    generation's secret, which its ranks and rank 0's store prove to each other, and `master_port`
    the generation's port; the coordinator derives both per generation (optional in v1; an executor
    refuses to launch ranks without it).
    """

    ranks: tuple[Count, ...] = Field(max_length=MAX_ITEMS)
    world_size: int = Field(ge=1, le=MAX_INT)
    master_addr: ProcessText
    master_port: int = Field(ge=1, le=65535)
    restore: RestoreSource = RestoreSource()
    command: tuple[ProcessText, ...] = Field(default=(), max_length=MAX_SMALL_ITEMS,
                                             description="argv of one rank: the job's command and args")
    checkpoint_dir: ProcessText | None = None
    resume: ProcessText | None = None
    submission: Id | None = None
    env: dict[EnvName, ProcessText] = Field(default_factory=dict, max_length=MAX_SMALL_ITEMS,
                                            description="the job's env: set in each rank's environment")
    workdir: ProcessText | None = None
    failure: FailureSettings = FailureSettings()
    rendezvous_key: RendezvousKey | None = None

    @model_validator(mode="after")
    def _ranks_fit(self) -> WorkerSpec:
        if len(set(self.ranks)) != len(self.ranks):
            raise ValueError("ranks lists a rank twice")
        if any(rank < 0 or rank >= self.world_size for rank in self.ranks):
            raise ValueError(f"every rank must be in [0, world_size={self.world_size})")
        return self


class Placement(Signed):
    """Which ranks of a job's generation a start or restart command places on `node`, signed by the
    coordinator on its own (the command's signature covers its secrets too: the rendezvous key, the
    job's environment). The executor stamps it on its ranks' `worker_start` and exits, and the detector
    uses a rank's reports only from the node it was placed on (docs/detection.md, "Generations come
    from the coordinator")."""

    type: Literal["placement"] = "placement"
    job: Id
    generation: Count
    node: Name
    ranks: tuple[Count, ...] = Field(max_length=MAX_SMALL_ITEMS)


class Command(NodeEvent, Signed):
    """A signed instruction to the executor on `node`, signed by the coordinator (`Signed`). Two
    fencing tokens: `generation` (of the job) and `epoch` (of the coordinator that sent it; none
    from one without a lease). A `health_check` names job HEALTH_CHECK_JOB at generation 0, its
    `incident_id` the coordinator's `node_suspect` incident, and carries `deadline`: the time by which
    the coordinator wants its answer, `health_check_deadline_s` after its first send (optional in v1;
    only a health check has one).
    """

    type: Literal["command"] = "command"
    id: Id
    plan_id: Id | None = None
    incident_id: Id | None = None
    job: Id
    generation: Count
    action: CommandAction
    worker: WorkerSpec | None = None
    epoch: Count | None = None
    deadline: Timestamp | None = None
    placement: Placement | None = None  # a start's or restart's, set by the coordinator as it signs


class AckStatus(StrEnum):
    ACCEPTED = "accepted"
    DONE = "done"
    FAILED = "failed"
    REFUSED = "refused"


class CommandAcked(NodeEvent, Signed):
    """An executor's answer to one command, signed by its node's key (`Signed`); `reason` says why it
    failed or was refused."""

    type: Literal["ack"] = "ack"
    command_id: Id
    job: str = Field(max_length=MAX_ID)
    generation: Count
    status: AckStatus
    reason: Text | None = None
    elapsed_s: Seconds | None = None


class NodeJoined(NodeEvent, Signed):
    """A node's executor started and takes commands, signed by the node's key: the node is known
    (a job may name it) and ends a leave it announced before."""

    type: Literal["node_joined"] = "node_joined"


class NodeLeaving(NodeEvent, Signed):
    """A node is shutting down on purpose (`trainmedic node` got SIGTERM), signed by the node's key:
    its jobs are moved off it as by a drain, and its silence that follows is not a fault."""

    type: Literal["node_leaving"] = "node_leaving"
    reason: Text = ""


class RanksFinished(NodeEvent, Signed):
    """Every rank `node` ran for `job` at `generation` exited with status 0, signed by the node's
    key. When every node of a generation has said so, the job has succeeded."""

    type: Literal["ranks_finished"] = "ranks_finished"
    job: Id
    generation: Count
    ranks: tuple[Count, ...] = Field(max_length=MAX_ITEMS)


class NodeRegistered(NodeEvent, Signed):
    """A node enrolled by an operator (`node_enrolled`) registers its own key, signed by its join
    token's key (`key_id` is the token's): the coordinator trusts `key` for the node from here, and
    adds the node to the cluster at `address` with `gpus` (`trainmedic node --join`)."""

    type: Literal["node_registered"] = "node_registered"
    key: PublicKey
    address: Name
    gpus: int = Field(default=8, ge=1, le=MAX_SMALL_ITEMS)


class NodeKeyRotated(NodeEvent, Signed):
    """A node's key replaced by `key` (`trainmedic keys rotate --node NAME` on the node), signed by the
    key it replaces: the coordinator trusts `key` for the node from here, and the old key a while
    longer (what it signed in flight), then no more."""

    type: Literal["node_key_rotated"] = "node_key_rotated"
    key: PublicKey


NodeReport = Annotated[CommandAcked | NodeJoined | NodeLeaving | RanksFinished | NodeRegistered
                       | NodeKeyRotated, Field(discriminator="type")]
"""What the `acks` topic carries: what executors report, each signed by its node's key."""
