"""The executor's decision: given a command, this node's state and the time, what to do or why not.

Pure: no clock, no Kafka, no processes. The order of the checks is the order of the
questions an operator asks: is it for me, is it authentic, did I already do it, is it
fresh, is it fenced off by a newer generation, does it make sense for what runs here.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass
from enum import StrEnum

from recovery.executor.state import MAY_HAVE_PROCESSES, GroupState, LocalGroup
from recovery.signing import TrustedKeys
from schemas import Command, CommandAction


class Step(StrEnum):
    """One thing the adapters do to apply a command, in the order given."""

    STOP = "stop"  # SIGTERM every rank's process group, SIGKILL after the grace period
    LAUNCH = "launch"  # start the ranks of the command's worker spec
    SIGNAL_REATTEMPT = "signal_reattempt"  # SIGUSR1 to every running rank


@dataclass(frozen=True, slots=True)
class Apply:
    """Accept the command and run `steps` (possibly none: the node is already as asked)."""

    steps: tuple[Step, ...]
    note: str


@dataclass(frozen=True, slots=True)
class Refuse:
    """Do not apply; ack `refused` with `reason`. `unverified`: refused because not authentic."""

    reason: str
    unverified: bool = False


@dataclass(frozen=True, slots=True)
class Skip:
    """Do nothing and ack nothing: the command was applied before (a redelivery)."""

    reason: str


Decision = Apply | Refuse | Skip


def decide(
    command: Command, *, received: bytes | Mapping | None, node: str, trusted: TrustedKeys | None,
    now: float, freshness_s: float, group: LocalGroup | None, applied: Container[str],
) -> Decision:
    """What this node's executor does with `command`, whose JSON as received is `received` (the
    signature is checked on it, never on the model). `trusted=None` means insecure: no check."""
    if command.node != node:
        return Refuse(f"command is for node {command.node!r}, this is {node!r}")
    if trusted is not None and (why := trusted.check(received)) is not None:
        return Refuse(why, unverified=True)
    if command.id in applied:
        return Skip(f"command {command.id} was already applied")
    age_s = now - command.ts
    if abs(age_s) > freshness_s:
        where = "old" if age_s > 0 else "in the future"
        return Refuse(f"stale: issued {abs(age_s):.1f}s {where}, freshness window is {freshness_s:g}s")
    if group is not None and command.generation < group.generation:
        return Refuse(
            f"fenced: generation {command.generation} is older than generation "
            f"{group.generation} of job {command.job} on this node"
        )
    return _steps(command, group)


def _steps(command: Command, group: LocalGroup | None) -> Apply | Refuse:
    state = GroupState.IDLE if group is None else group.state
    live = state in MAY_HAVE_PROCESSES
    if command.action in (CommandAction.START, CommandAction.RESTART):
        worker = command.worker
        if worker is None or not worker.command or not worker.ranks:
            return Refuse(f"{command.action} needs a worker spec with ranks and a command (argv)")
        if (
            command.action == CommandAction.START and state == GroupState.RUNNING
            and group is not None and group.generation == command.generation
        ):
            return Apply((), f"generation {command.generation} already runs")
        steps = (Step.STOP, Step.LAUNCH) if live else (Step.LAUNCH,)
        return Apply(steps, f"launch {len(worker.ranks)} ranks")
    if command.action == CommandAction.STOP:
        return Apply((Step.STOP,), "stop the ranks") if live else Apply((), "no rank runs here")
    # REATTEMPT: only the generation that runs can retry in place.
    if state != GroupState.RUNNING or group is None:
        return Refuse(f"reattempt: no running ranks of job {command.job} here (state {state})")
    if command.generation != group.generation:
        return Refuse(f"reattempt for generation {command.generation}, but {group.generation} runs")
    return Apply((Step.SIGNAL_REATTEMPT,), "signal the ranks to retry the step in place")
