"""The executor's decision: given a command, this node's state and the time, what to do or why not;
pure (docs/executor.md, "Command flow").
"""

from __future__ import annotations

import os
import re
from collections.abc import Container, Mapping
from dataclasses import dataclass
from enum import StrEnum

from trainmedic.recovery.executor.core.ledger_state import RecordedAck
from trainmedic.recovery.executor.core.state import MAY_HAVE_PROCESSES, GroupState, LocalGroup
from trainmedic.recovery.signing import TrustedKeys
from trainmedic.schemas import Command, CommandAction

_DIRECTORY_NAME = re.compile(r"[A-Za-z0-9._:\-]{1,128}")


class Step(StrEnum):
    """One thing the adapters do to apply a command, in the order given."""

    STOP = "stop"  # SIGTERM every rank's process group, SIGKILL after the grace period
    LAUNCH = "launch"  # start the ranks of the command's worker spec
    SIGNAL_REATTEMPT = "signal_reattempt"  # SIGUSR1 to every running rank
    HEALTH_CHECK = "health_check"  # run this node's probe, bounded in time; ack done or failed


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
class Reack:
    """Do nothing, but send again the ack recorded for the command: it was applied before, and
    its sender, not having had the answer (lost, or never sent before a crash), asks again."""

    answer: RecordedAck
    reason: str


@dataclass(frozen=True, slots=True)
class Skip:
    """Do nothing and ack nothing: the command was applied before, and its answer was not recorded
    (a ledger written before answers were)."""

    reason: str


Decision = Apply | Refuse | Reack | Skip


def directory_name(job: str) -> bool:
    """Whether a job id is safe as one path component under the executor's state directory."""
    return bool(_DIRECTORY_NAME.fullmatch(job)) and job not in (".", "..")


def decide(
    command: Command, *, received: bytes | Mapping | None, node: str, trusted: TrustedKeys | None,
    now: float, freshness_s: float, group: LocalGroup | None, applied: Container[str],
    answers: Mapping[str, RecordedAck] | None = None, epoch: int | None = None,
    deployment: str | None = None,
) -> Decision:
    """What this node's executor does with `command`, whose JSON as received is `received` (the
    signature is checked on it, never on the model). `trusted=None` means insecure: no check.
    `answers` holds the final acks recorded for applied commands (command id -> ack); `epoch` the
    newest coordinator epoch this node applied a command of (None: none yet); `deployment` this
    node's topic prefix, which the command must be signed for (None: not checked). Pure: no clock,
    no Kafka, no processes. The checks go in the order an operator asks: is it for me, is it
    authentic, did I already do it, is it fresh, is it fenced off by a newer coordinator or a newer
    generation, does it make sense for what runs here."""
    if command.node != node:
        return Refuse(f"command is for node {command.node!r}, this is {node!r}")
    if trusted is not None and (why := trusted.check(received, deployment=deployment)) is not None:
        return Refuse(why, unverified=True)
    checked = command.action is CommandAction.HEALTH_CHECK and command.id in (answers or {})
    if command.id in applied or checked:  # a health check is never `applied`: only its answer is kept
        answer = (answers or {}).get(command.id)
        if answer is not None:
            return Reack(answer, f"command {command.id} was already applied: its recorded ack "
                                 f"({answer.status}) is sent again")
        return Skip(f"command {command.id} was already applied")
    age_s = now - command.ts
    if abs(age_s) > freshness_s:
        where = "old" if age_s > 0 else "in the future"
        return Refuse(f"stale: issued {abs(age_s):.1f}s {where}, freshness window is {freshness_s:g}s")
    if epoch is not None and (command.epoch is None or command.epoch < epoch):
        return Refuse(f"fenced: sent by coordinator epoch {command.epoch}, this node follows epoch {epoch}")
    if group is not None and command.generation < group.generation:
        return Refuse(
            f"fenced: generation {command.generation} is older than generation "
            f"{group.generation} of job {command.job} on this node"
        )
    return _steps(command, group)


def _steps(command: Command, group: LocalGroup | None) -> Apply | Refuse:
    if command.action is CommandAction.HEALTH_CHECK:  # no job's: it touches no ranks and no generation
        return Apply((Step.HEALTH_CHECK,), "run this node's health check")
    state = GroupState.IDLE if group is None else group.state
    live = state in MAY_HAVE_PROCESSES
    if command.action in (CommandAction.START, CommandAction.RESTART):
        if not directory_name(command.job):
            return Refuse(f"job id {command.job!r} cannot name this node's log and snapshot directories "
                          "(letters, digits and . _ : - only, not . or ..)")
        worker = command.worker
        if worker is None or not worker.command or not worker.ranks:
            return Refuse(f"{command.action} needs a worker spec with ranks and a command (argv)")
        if worker.submission is None or not directory_name(worker.submission):
            return Refuse(f"{command.action} names no submission of job {command.job} that can name a "
                          "directory: without one its ranks could restore another submission's state "
                          "(a coordinator older than this executor? upgrade it)")
        if worker.rendezvous_key is None:
            return Refuse(f"{command.action} of job {command.job} carries no rendezvous key: its ranks "
                          "would meet in a store anyone can join (a coordinator older than this "
                          "executor? upgrade it)")
        if worker.workdir is not None and not os.path.isabs(worker.workdir):
            return Refuse(f"workdir {worker.workdir!r} is relative: a job's workdir must be an absolute "
                          "path, the same on every node (a node has no directory to resolve it against)")
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
