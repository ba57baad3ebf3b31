"""Jobs as they are asked for (a spec), and the operators' events on the `jobs` topic: a job submitted,
a job stopped. A job's nodes are host names (docs/coordinator.md, "Jobs").
"""

from __future__ import annotations

import hashlib
import re
import time
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, field_validator, model_validator

from trainmedic.schemas.base import Event, Model, Signed
from trainmedic.schemas.bounds import (
    MAX_ITEMS,
    MAX_NAME,
    MAX_SMALL_ITEMS,
    Flops,
    Id,
    Name,
    ProcessText,
    Seconds,
    Text,
    Weight,
)

# An environment variable's name, as a POSIX shell writes one.
EnvName = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME,
                                           pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
LATEST = "latest"  # `resume: latest`: the newest checkpoint an earlier submission of the job wrote
SUBMISSION_NAME = re.compile(r"\d{8}T\d{6}\.\d{3}Z-[0-9a-f]{8}")  # what JobSubmitted.submission gives
PositiveSeconds = Annotated[float, Field(gt=0, le=86_400 * 365, allow_inf_nan=False)]


class RestartPolicy(Model):
    """How the coordinator restarts this job for one failure that keeps coming back; a field left
    out takes the coordinator's default (its config's `max_restarts`, `restart_backoff_s`,
    `restart_window_s`)."""

    max_restarts: int | None = Field(
        default=None, ge=0, le=MAX_SMALL_ITEMS, description="restarts for one failure within the window")
    backoff_s: tuple[Seconds, ...] | None = Field(
        default=None, min_length=1, max_length=64, description="wait before restart 2, 3, ...")
    window_s: PositiveSeconds | None = None


class FailureSettings(Model):
    """How this job's failures are found; a field left out takes the service's default."""

    hang_floor_s: PositiveSeconds | None = Field(
        default=None, description="no step for this long (at least) is a hang (the detector's hang.floor_s)")
    collective_timeout_s: PositiveSeconds | None = Field(
        default=None, description="rendezvous and each collective time out after it (init_from_env)")



class JobSpec(Model):
    """What a user asks to run: sizes it can run at, where, and how to launch a rank."""

    id: Id
    weight: Weight = 1.0
    throughput: dict[int, Flops] = Field(max_length=MAX_ITEMS,
                                         description="nodes -> achieved FLOP/s at that size")
    nodes: tuple[Name, ...] = Field(default=(), max_length=MAX_ITEMS)
    pool: tuple[Name, ...] | None = Field(
        default=None, max_length=MAX_ITEMS, description="the only nodes the job may ever run on: its "
        "nodes and its spares (a Slurm allocation's); none: any of the cluster's")
    ranks_per_node: int = Field(default=1, ge=1, le=MAX_SMALL_ITEMS)
    master_port: int = Field(default=29500, ge=1, le=65535,
                             description="first of the 1,024 rendezvous ports on rank 0's node: each "
                                         "generation listens at one of its own")
    command: tuple[ProcessText, ...] = Field(min_length=1, max_length=MAX_SMALL_ITEMS,
                                             description="argv that launches one rank")
    args: tuple[ProcessText, ...] = Field(default=(), max_length=MAX_SMALL_ITEMS,
                                          description="appended to command: the script's own arguments")
    env: dict[EnvName, ProcessText] = Field(
        default_factory=dict, max_length=MAX_SMALL_ITEMS,
        description="set in every rank's environment (published on Kafka: never a secret)")
    workdir: ProcessText | None = Field(
        default=None, description="each rank's working directory: relative paths in command and args")
    checkpoint_dir: ProcessText | None = Field(
        default=None, description="shared storage for checkpoints: each submission writes into a "
        "directory of its own in it (CHECKPOINT_DIR/JOB/SUBMISSION)")
    resume: ProcessText | None = Field(
        default=None, description="start from this checkpoint (a file, a DCP directory, or a directory "
        "of them), or `latest`: the newest any earlier submission wrote in checkpoint_dir; checked to be "
        "of the same model and world size. Without it a submission starts at step 0")
    transition_s: Seconds | None = None
    restart: RestartPolicy = RestartPolicy()
    failure: FailureSettings = FailureSettings()

    @property
    def argv(self) -> tuple[str, ...]:
        """What one rank runs: `command`, then `args`."""
        return (*self.command, *self.args)

    @field_validator("throughput")
    @classmethod
    def _positive_sizes(cls, table: dict[int, float]) -> dict[int, float]:
        if not table:
            raise ValueError("throughput needs at least one size")
        for size, flops in table.items():
            if size <= 0:
                raise ValueError(f"throughput size {size} must be a positive node count")
            if size > MAX_ITEMS:
                raise ValueError(f"throughput size {size} is more nodes than a cluster has ({MAX_ITEMS})")
            if flops < 0:
                raise ValueError(f"throughput at size {size} must not be negative")
        return table

    @model_validator(mode="after")
    def _nodes_fit_the_table(self) -> JobSpec:
        if len(set(self.nodes)) != len(self.nodes):
            raise ValueError("nodes lists a node twice")
        if self.nodes and len(self.nodes) not in self.throughput:
            sizes = ", ".join(str(size) for size in sorted(self.throughput))
            raise ValueError(f"nodes names {len(self.nodes)} nodes, but throughput lists only sizes {sizes}")
        if self.pool is not None and not set(self.nodes) <= set(self.pool):
            outside = ", ".join(sorted(set(self.nodes) - set(self.pool)))
            raise ValueError(f"nodes {outside} not in pool: a job's pool holds its nodes and its spares")
        return self


class JobSubmitted(Event, Signed):
    """A job was registered with the coordinator, signed by an operator's key (`Signed`)."""

    type: Literal["job_submitted"] = "job_submitted"
    job: JobSpec

    @property
    def submission(self) -> str:
        """This submission's name: when it was submitted (UTC, to the millisecond, so that names sort
        by the submitter's clock) and a digest of that time and the job id, e.g.
        `20261205T190845.123Z-3f2a9c1b` (`SUBMISSION_NAME`). Its ranks' files on every node and its
        checkpoints are kept under it, so a job id submitted again never restores, appends to or
        prunes what an earlier submission left. Neither the signature nor the spec's serialization
        is part of it: the same record names the same submission, signed or not, in any version."""
        whole, ms = divmod(round(self.ts * 1000), 1000)
        identity = f"{self.job.id}\x1f{self.ts!r}"
        return (time.strftime("%Y%m%dT%H%M%S", time.gmtime(whole)) + f".{ms:03d}Z-"
                + hashlib.sha256(identity.encode()).hexdigest()[:8])


class JobStopRequested(Event, Signed):
    """An operator stops a job (`trainmedic job stop`), signed by an operator's key: its ranks are
    stopped, its nodes freed, and it ends `stopped`."""

    type: Literal["job_stop"] = "job_stop"
    job: Id
    reason: Text = ""
    by: Text = "operator"


JobEvent = Annotated[JobSubmitted | JobStopRequested, Field(discriminator="type")]
"""What the `jobs` topic carries: operators' events about jobs."""
