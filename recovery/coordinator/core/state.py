"""The cluster as the coordinator knows it: nodes, jobs, incidents and commands, plain values built
only by `fold.apply`; the job's and the command's state machines allow the moves of one table each,
and `move` raises on anything else (docs/coordinator.md, "The fold").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeVar

from trainmedic.recovery.coordinator.core.config import CoordinatorConfig
from trainmedic.schemas.commands import Command, CommandAction
from trainmedic.schemas.incident import Incident
from trainmedic.schemas.jobs import JobSpec, JobStopRequested
from trainmedic.schemas.nodes import PublicKey
from trainmedic.schemas.recovery import RecoveryPlanned


class IllegalTransition(RuntimeError):
    """A move the state table does not allow: a bug in the coordinator or a corrupt log."""


class Rejected(ValueError):
    """A valid record the coordinator will not take: it breaks a bound (job_bounds.py) or names a
    node outside the cluster. It is dead-lettered with this reason and changes nothing."""


class JobState(StrEnum):
    """Where a job is. A plan moves it; the plan's outcome settles it; `job_ended` closes it.

    SUBMITTED → STARTING (start plan at generation 0) or RECOVERING (a re-plan places it)
    STARTING, RECOVERING → RUNNING (plan completed), RECOVERING or STOPPING (a newer plan), FAILED
    RUNNING → RECOVERING, STOPPING, FAILED (the coordinator gave up on it)
    STOPPING (a plan took all its nodes) → QUEUED (stops done), RECOVERING, FAILED
    QUEUED → RECOVERING (a re-plan gives it nodes)
    FAILED → RECOVERING, STOPPING (a newer plan)
    STARTING, RECOVERING, RUNNING, FAILED → SUCCEEDED (every node's ranks of its generation exited 0)
    SUBMITTED, QUEUED, FAILED, STOPPING → STOPPED (an operator's stop, once no rank of it runs)
    SUCCEEDED, STOPPED: terminal; the job's nodes are free and nothing restarts it
    FAILED with an `end_reason` (`job_ended` failed: the coordinator gave up on it): terminal too
    """

    SUBMITTED = "submitted"
    STARTING = "starting"
    RUNNING = "running"
    RECOVERING = "recovering"
    STOPPING = "stopping"
    QUEUED = "queued"
    FAILED = "failed"
    SUCCEEDED = "succeeded"
    STOPPED = "stopped"

    @property
    def in_flight(self) -> bool:
        """A plan's commands are out and its outcome is not known yet."""
        return self in (JobState.STARTING, JobState.RECOVERING, JobState.STOPPING)

    @property
    def ended(self) -> bool:
        """The job is over (`job_ended`): it holds no node and takes no plan."""
        return self in (JobState.SUCCEEDED, JobState.STOPPED)


JOB_MOVES: dict[JobState, frozenset[JobState]] = {
    JobState.SUBMITTED: frozenset({JobState.STARTING, JobState.RECOVERING, JobState.STOPPED}),
    JobState.STARTING: frozenset({JobState.RUNNING, JobState.RECOVERING, JobState.STOPPING,
                                  JobState.FAILED, JobState.SUCCEEDED}),
    JobState.RECOVERING: frozenset({JobState.RUNNING, JobState.RECOVERING, JobState.STOPPING,
                                    JobState.FAILED, JobState.SUCCEEDED}),
    JobState.RUNNING: frozenset({JobState.RECOVERING, JobState.STOPPING, JobState.FAILED,
                                 JobState.SUCCEEDED}),
    JobState.STOPPING: frozenset({JobState.QUEUED, JobState.RECOVERING, JobState.FAILED, JobState.STOPPED}),
    JobState.QUEUED: frozenset({JobState.RECOVERING, JobState.STOPPED}),
    JobState.FAILED: frozenset({JobState.RECOVERING, JobState.STOPPING, JobState.SUCCEEDED,
                                JobState.STOPPED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.STOPPED: frozenset(),
}


class CommandStatus(StrEnum):
    """A command's life: ISSUED → ACCEPTED → DONE, FAILED or REFUSED (ISSUED may skip ACCEPTED).

    Terminal states take no move: a re-sent command is acknowledged again, and those acks
    are ignored. A health check never becomes REFUSED: a refusal of one is no answer about the node
    (`CommandRecord.refused`; fold.py).
    """

    ISSUED = "issued"
    ACCEPTED = "accepted"
    DONE = "done"
    FAILED = "failed"
    REFUSED = "refused"

    @property
    def terminal(self) -> bool:
        return self in (CommandStatus.DONE, CommandStatus.FAILED, CommandStatus.REFUSED)


_ANSWERS = frozenset({CommandStatus.ACCEPTED, CommandStatus.DONE, CommandStatus.FAILED,
                      CommandStatus.REFUSED})
COMMAND_MOVES: dict[CommandStatus, frozenset[CommandStatus]] = {
    CommandStatus.ISSUED: _ANSWERS,
    CommandStatus.ACCEPTED: _ANSWERS,
    CommandStatus.DONE: frozenset(),
    CommandStatus.FAILED: frozenset(),
    CommandStatus.REFUSED: frozenset(),
}


S = TypeVar("S", JobState, CommandStatus)


def move(table: dict[S, frozenset[S]], current: S, target: S, what: str) -> S:
    """`target`, if the table allows it from `current`; else IllegalTransition."""
    if target not in table[current]:
        raise IllegalTransition(f"{what}: cannot go from {current} to {target}")
    return target


class NodeMode(StrEnum):
    """What the operators asked of a node (`lifecycle.py`): READY (in the pool), CORDONED (no new
    work), DRAINING (no work at all: its jobs are re-planned off it). Any mode may follow any
    other; the latest event, by its time, wins."""

    READY = "ready"
    CORDONED = "cordoned"
    DRAINING = "draining"


@dataclass
class Node:
    """One machine; isolated (unhealthy) once a decision on the log takes it out of service,
    back once an uncordon or re-admission later than that decision says so."""

    id: str
    address: str
    switch: str | None = None
    gpus: int = 8
    isolated_by: str | None = None  # the incident that blamed it
    isolated_ts: float | None = None  # when it was decided: isolations count against the cap
    isolations: tuple[tuple[float, str], ...] = ()  # every isolation decided: (when, incident)
    mode: NodeMode = NodeMode.READY
    mode_ts: float | None = None  # the lifecycle event that set `mode`, and why
    mode_reason: str = ""
    returned_ts: float | None = None  # the latest uncordon or re-admission: isolations before it end
    heard_from: float | None = None  # the latest report its node signed (ack, ranks_finished, ...)
    left_ts: float | None = None  # the latest leave the node announced itself (node_leaving), and why
    left_reason: str = ""
    joined_ts: float | None = None  # the latest node_joined: ends a leave announced before it
    rejoined_ts: float | None = None  # the latest node_joined that ended a leave (one announced before it)
    suspect_by: str | None = None  # its open `node_suspect` incident whose health check is not decided
    # its newest open `node_suspect` that a later uncordon, re-admission or return ended (its check is
    # over): `health.checks_due` resolves it
    suspicion_vouched: str | None = None
    vouched_ts: float | None = None  # its latest passed health check: job failures before it are answered
    # enrolled nodes (membership.py): its key and when it registered it; when an operator removed it
    key: PublicKey | None = None
    registered_ts: float | None = None
    removed_ts: float | None = None
    removed_reason: str = ""
    # keys it rotated away from (`node_key_rotated`): (key id, until when it signs, its key if registered)
    retired: tuple[tuple[str, float, PublicKey | None], ...] = ()

    @property
    def healthy(self) -> bool:
        return self.isolated_by is None

    @property
    def removed(self) -> bool:
        """An operator removed the node (`node_removed`) and it has not registered again since."""
        removed, registered = self.removed_ts, self.registered_ts
        return removed is not None and (registered is None or registered < removed)

    @property
    def leaving(self) -> bool:
        """The node announced a planned shutdown and has not joined again since, or was removed: drained."""
        announced = self.left_ts is not None and (self.joined_ts is None or self.joined_ts < self.left_ts)
        return announced or self.removed

    @property
    def admitted(self) -> bool:
        """May take work: a node of the config, or an enrolled one that joined after it registered (its
        executor announced itself with the key it registered)."""
        registered, joined = self.registered_ts, self.joined_ts
        return registered is None or (joined is not None and joined >= registered)


@dataclass(frozen=True)
class Step:
    """One command a plan calls for: `action` to `node`."""

    node: str
    action: CommandAction


@dataclass
class Job:
    """A submitted job: what was asked (`spec`) and what runs now (generation, nodes, plan)."""

    spec: JobSpec
    submission: str = ""  # which submission of the job id this is (`JobSubmitted.submission`)
    state: JobState = JobState.SUBMITTED
    generation: int | None = None
    nodes: tuple[str, ...] = ()
    plan: RecoveryPlanned | None = None
    steps: dict[str, Step] = field(default_factory=dict)  # command id -> step, of `plan`
    outstanding: set[str] = field(default_factory=set)  # ids of `steps` not done: completion reads only these
    not_started: str | None = None  # why its first start was skipped
    restarts: tuple[tuple[float, str], ...] = ()  # (when, incident) of each restart that blamed the job
    stepped: bool | None = None  # a failed generation of it completed a step; False: none did; None: unknown
    healthy_since: float | None = None  # a generation stepped healthily from here: earlier restarts forgiven
    finished: set[tuple[int, str]] = field(default_factory=set)  # (generation, node) whose ranks exited 0
    stop: JobStopRequested | None = None  # an operator's stop, the first one read
    end_reason: str = ""  # why it ended (`job_ended`'s reason)

    @property
    def closed(self) -> bool:
        """`job_ended` was read for it: it succeeded, was stopped, or failed for good (FAILED with the
        reason it ended; a FAILED job without one waits for the re-plan that heals it)."""
        return self.state.ended or bool(self.end_reason)

    @property
    def over(self) -> bool:
        """Closed, or being stopped: it takes no new plan other than its stop."""
        return self.closed or self.stop is not None


@dataclass
class CommandRecord:
    """A command as issued (unsigned), every time it was sent, and what its node answered."""

    command: Command
    sent: tuple[float, ...]
    status: CommandStatus = CommandStatus.ISSUED
    accepted_ts: float | None = None
    reason: str | None = None
    refused: tuple[float, str] | None = None  # a health check's latest refusal (ts, reason): no answer


@dataclass(frozen=True)
class Enrollment:
    """An operator's `node_enrolled`: the join token's key may register `node` once, until `expires`
    or a removal of the node after `ts` (membership.py); `registered`: the (key id, ts) it registered."""

    node: str
    ts: float
    token: PublicKey
    expires: float
    registered: tuple[str, float] | None = None


@dataclass
class ClusterState:
    """Everything the coordinator decides from; equal logs fold to equal states."""

    config: CoordinatorConfig
    nodes: dict[str, Node] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)
    incidents: dict[str, Incident] = field(default_factory=dict)
    handled: dict[str, str] = field(default_factory=dict)  # incident id -> plan id, or "skipped"
    plans: set[tuple[str, str]] = field(default_factory=set)  # (plan id, job) seen
    commands: dict[str, CommandRecord] = field(default_factory=dict)
    early_acks: dict[str, list] = field(default_factory=dict)  # acks of commands not seen yet
    failures: set[str] = field(default_factory=set)  # SEV1/SEV2 incident ids, for the MTBF
    pending: set[str] = field(default_factory=set)  # open incidents not decided yet (waiting, or new)
    first_ts: float | None = None  # the earliest job or incident: the start of observed time
    members: set[str] = field(default_factory=set)  # the cluster's nodes: all a job or plan may name
    enrollments: dict[str, Enrollment] = field(default_factory=dict)  # token key id -> (membership.py)
    removals: dict[str, tuple[float, ...]] = field(default_factory=dict)  # node -> its removals' times
    # key id -> the node that registered it or rotated to it (membership.py): no other node may take it
    key_owners: dict[str, str] = field(default_factory=dict)
    isolated: set[str] = field(default_factory=set)  # nodes out of service (`lifecycle.isolated`)
    # nodes whose health check is out (`Node.suspect_by`) or whose vouched suspicion waits to be resolved
    suspected: set[str] = field(default_factory=set)
    capacity_ts: float | None = None  # the latest node event that may change the plan (drain, return)
    capacity_decided_ts: float | None = None  # the latest re-plan for it (`capacity.py`)
    # The root of every generation's rendezvous secret (rendezvous.py): the coordinator passes its own,
    # from its signing key; empty only in a state that sends no command (a CLI's view, a simulation).
    # Not of the log: neither compared nor shown.
    rendezvous_root: bytes = field(default=b"", compare=False, repr=False)
    # Incident id -> when this coordinator received its latest status (open, then resolved), by its own
    # clock or the broker's (`fold.apply`): windows are judged on it, never on the incident's `ts`, which
    # another host's clock set. Not of the log: a rebuild receives nothing, and goes by `ts` (`received`).
    arrived: dict[str, float] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def initial(cls, config: CoordinatorConfig, rendezvous_root: bytes = b"") -> ClusterState:
        state = cls(config, rendezvous_root=rendezvous_root)
        state.members.update(node.id for node in config.nodes)
        for node in config.nodes:
            state.nodes[node.id] = Node(node.id, node.address or config.default_address or node.id,
                                        node.switch, node.gpus)
        return state

    def received(self, incident: Incident) -> float:
        """When the coordinator received `incident` (`arrived`); its `ts` for one it made itself, or
        read from the log on a rebuild."""
        return self.arrived.get(incident.id, incident.ts)

    def in_cluster(self, node_id: str) -> bool:
        """`node_id` is one of the cluster's nodes: listed in the config's `nodes`, or enrolled by an
        operator and registered by the node (membership.py). A job or an incident never adds one."""
        return node_id in self.members

    def node(self, node_id: str) -> Node:
        """The node, registered on first mention (nodes outside the config sit on no switch)."""
        if node_id not in self.nodes:
            self.nodes[node_id] = Node(node_id, self.config.default_address or node_id)
        return self.nodes[node_id]

    def healthy(self, node_id: str) -> bool:
        node = self.nodes.get(node_id)
        return node is None or node.healthy

    def awaited(self, node_id: str) -> bool:
        """A command to the node is waited for and escalates when it fails: the node is healthy and
        not leaving (a node shutting down may be gone before it answers; that is no fault of it)."""
        node = self.nodes.get(node_id)
        return node is None or (node.healthy and not node.leaving)

    def job_on(self, node_id: str) -> Job | None:
        """The job whose current nodes include `node_id` (a node serves at most one)."""
        for job in self.jobs.values():
            if node_id in job.nodes:
                return job
        return None
