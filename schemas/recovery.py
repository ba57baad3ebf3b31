"""The coordinator's decisions and their outcomes, on the `recovery` topic that only it writes, each
record signed with its command-signing key (docs/security.md, "The coordinator's decisions have a
topic of their own"; docs/coordinator.md, "Lifecycle events").
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from trainmedic.schemas.base import Event, Signed
from trainmedic.schemas.bounds import MAX_ITEMS, Count, Id, Name, Seconds, Text
from trainmedic.schemas.commands import RestoreSource
from trainmedic.schemas.incident import Incident
from trainmedic.schemas.nodes import NodeReadmitted


class RecoveryKind(StrEnum):
    """What a plan does to a job: start it, retry in place, restart in place, move it, or stop it
    on every node because an operator asked (`job_stop`) or the coordinator gave up on it."""

    START = "start"
    REATTEMPT = "reattempt"
    RESTART = "restart"
    RECONFIGURE = "reconfigure"
    STOP = "stop"


class RecoveryPlanned(Event, Signed):
    """A job's nodes at a generation, decided for an incident (none for a job's first start).

    `nodes` is in rank order (rank 0 on the first); `previous` the nodes it ran on before.
    `restore` lists only the nodes that do not keep their own state.
    """

    type: Literal["recovery_planned"] = "recovery_planned"
    plan_id: Id
    incident_id: Id | None = None
    job: Id
    kind: RecoveryKind
    generation: Count
    nodes: tuple[Name, ...] = Field(max_length=MAX_ITEMS)
    previous: tuple[Name, ...] = Field(default=(), max_length=MAX_ITEMS)
    restore: dict[Name, RestoreSource] = Field(default={}, max_length=MAX_ITEMS)
    horizon_s: Seconds | None = Field(default=None, description="the planner's horizon (MTBF estimate)")
    isolated: dict[Name, Id] | None = Field(default=None, max_length=MAX_ITEMS, description="nodes this "
                                            "decision takes out of service, each with the incident that "
                                            "blamed it; absent (None) in logs written before isolations "
                                            "were decisions")


class PlanOutcome(Event, Signed):
    """How a job's plan (`plan_id`, at `generation`) ended; each kind below narrows `type`, which is
    declared here so that the JSON keeps its fields in the order they had before this base existed."""

    type: Literal["recovery_completed", "recovery_failed"]
    plan_id: Id
    job: Id
    generation: Count


class RecoveryCompleted(PlanOutcome):
    """Every command of a job's plan was acknowledged done (commands to isolated nodes aside)."""

    type: Literal["recovery_completed"] = "recovery_completed"


class RecoveryFailed(PlanOutcome):
    """A job's plan cannot complete; `escalation` is the incident it escalated to, if any."""

    type: Literal["recovery_failed"] = "recovery_failed"
    reason: Text
    command_id: Id | None = None
    node: Name | None = None
    escalation: Id | None = None


class RecoverySkipped(Event, Signed):
    """The coordinator looked at an incident (or a new job) and had nothing to do, or chose not to
    act (a limit was reached), and why. `isolated` as in `RecoveryPlanned`."""

    type: Literal["recovery_skipped"] = "recovery_skipped"
    incident_id: Id | None = None
    job: Id | None = None
    node: Name | None = None
    reason: Text
    isolated: dict[Name, Id] | None = Field(default=None, max_length=MAX_ITEMS)


class JobEnded(Event, Signed):
    """A job is over and its nodes are free: every rank of `generation` exited with status 0 on every
    node (`succeeded`), an operator stopped it and its ranks were stopped (`stopped`), the coordinator
    gave up on it and stopped its ranks (`failed`), or it refused the job's submission, which never
    ran (`rejected`: `reason` says why). Nothing restarts it after this; its incidents are skipped.

    `failed` and `rejected` came later: a reader older than them finds such a record invalid and
    skips it (logged, dead-lettered), so it sees a given-up job `stopping` (its stop plan) and no
    rejected job, as it did before; nothing needs migrating, upgrade the readers with the writer."""

    type: Literal["job_ended"] = "job_ended"
    job: Id
    state: Literal["succeeded", "stopped", "failed", "rejected"]
    generation: Count | None = Field(default=None, description="the generation that ran last; none "
                                     "for a job stopped before it started, or rejected")
    reason: Text = ""


Lifecycle = RecoveryPlanned | RecoveryCompleted | RecoveryFailed | RecoverySkipped | JobEnded
RecoveryLog = Annotated[Incident | Lifecycle | NodeReadmitted, Field(discriminator="type")]
"""What the `recovery` topic carries: everything the coordinator decides, and nothing else writes."""
