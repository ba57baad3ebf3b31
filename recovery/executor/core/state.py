"""The state of one job's local worker group on this node, an explicit state machine: `LocalGroup` is what
this node runs for a job at one generation (a `WorkerSpec` is only what was asked) (docs/executor.md,
"The state machine").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from trainmedic.schemas import WorkerSpec


class GroupState(StrEnum):
    """Where a job's local ranks are.

    IDLE      nothing ever ran here for the job       -> RUNNING (start, restart)
    RUNNING   the ranks were launched                 -> STOPPING (stop, restart)
                                                      -> FAILED (a rank ended non-zero or by a signal)
                                                      -> SUCCEEDED (every rank exited 0)
    FAILED    a rank died on its own; others may live -> STOPPING (stop, start, restart)
    SUCCEEDED every rank exited 0                     -> STOPPING (stop, start, restart)
    STOPPING  SIGTERM sent, waiting for the ranks     -> STOPPED
    STOPPED   no rank of the job runs here            -> RUNNING (start, restart)
    """

    IDLE = "idle"
    RUNNING = "running"
    FAILED = "failed"
    SUCCEEDED = "succeeded"
    STOPPING = "stopping"
    STOPPED = "stopped"


ALLOWED: dict[GroupState, frozenset[GroupState]] = {
    GroupState.IDLE: frozenset({GroupState.RUNNING}),
    GroupState.RUNNING: frozenset({GroupState.STOPPING, GroupState.FAILED, GroupState.SUCCEEDED}),
    GroupState.FAILED: frozenset({GroupState.STOPPING}),
    GroupState.SUCCEEDED: frozenset({GroupState.STOPPING}),
    GroupState.STOPPING: frozenset({GroupState.STOPPED}),
    GroupState.STOPPED: frozenset({GroupState.RUNNING}),
}

# States in which processes of the group may still be alive and must be stopped first.
MAY_HAVE_PROCESSES = frozenset({GroupState.RUNNING, GroupState.FAILED, GroupState.SUCCEEDED})


class IllegalTransition(RuntimeError):
    """A move the table does not allow: a bug in the executor, never a bad command."""


@dataclass(frozen=True, slots=True)
class LocalGroup:
    """One job's ranks on this node at one generation, and the state they are in."""

    job: str
    generation: int
    state: GroupState = GroupState.IDLE
    spec: WorkerSpec | None = None

    def to(self, state: GroupState, **changes: object) -> LocalGroup:
        """The group after a move to `state`; raises IllegalTransition when the table forbids it."""
        if state not in ALLOWED[self.state]:
            raise IllegalTransition(f"job {self.job}: {self.state} -> {state} is not allowed")
        return replace(self, state=state, **changes)


def after_exit(group: LocalGroup, clean: bool, still_alive: int) -> LocalGroup:
    """The group after one of its ranks ended on its own (not stopped by us).

    A rank that fails makes the group FAILED (the coordinator decides what next); the
    last rank ending cleanly, with none failed, makes it SUCCEEDED.
    """
    if group.state != GroupState.RUNNING:
        return group
    if not clean:
        return group.to(GroupState.FAILED)
    return group.to(GroupState.SUCCEEDED) if still_alive == 0 else group


def fenced_at(group: LocalGroup, generation: int) -> LocalGroup:
    """The group remembering that a command of `generation` was applied (generations never go back)."""
    return replace(group, generation=max(group.generation, generation))
