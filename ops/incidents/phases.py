"""Where a recovery's seconds went, from the log alone: the milestones from the first evidence of a
fault to the job's first step after it, and the phases between them (docs/coordinator.md, "Recovery
by phase"). Pure: the incident fold in, phases out.
"""

from __future__ import annotations

from typing import NamedTuple

from trainmedic.ops.incidents.fold import IncidentHistory
from trainmedic.schemas.incident import Incident
from trainmedic.schemas.recovery import RecoveryCompleted, RecoveryPlanned

# (phase, the milestone that ends it, what it spans); in the order a recovery passes them.
PHASES = (
    ("detect", "decided", "first evidence → the detector decided the incident"),
    ("publish", "on kafka", "→ the incident on Kafka"),
    ("plan", "planned", "→ the coordinator's plan"),
    ("stop", "stopped", "→ the job's remaining ranks stopped"),
    ("start", "started", "→ every node's command done: ranks started"),
    ("rendezvous", "joined", "→ every rank joined the process group"),
    ("restore", "restored", "→ every rank's state restored"),
    ("first step", "stepped", "→ the job's first step"),
)


class Phase(NamedTuple):
    """One phase: from the previous milestone seen to `ends` at `ts` (event time); `seconds` is 0
    where clocks put the end before the start."""

    name: str
    ends: str
    ts: float
    seconds: float


class Milestones(NamedTuple):
    """When each milestone of one job's recovery was reached (None: not in the log)."""

    fault: float
    decided: float | None
    on_kafka: float | None
    planned: float | None
    stopped: float | None
    started: float | None
    joined: float | None
    restored: float | None
    stepped: float | None


def milestones(history: IncidentHistory, opened: Incident, published: float | None, plan: RecoveryPlanned,
               done: RecoveryCompleted | None, stepped: float | None) -> Milestones:
    """The milestones of `plan`'s job recovering from `opened` (`done`: the plan's completion,
    `stepped`: its first step after the repair). Stopped: the last rank of an older generation its
    executor stopped after the plan; joined: the last `worker_start` of the plan's generation;
    restored: when the last rank began its first step (its step time before it)."""
    key = (plan.job, plan.generation)
    stops = [ts for (job, generation), times in history.stopped.items()
             if job == plan.job and generation < plan.generation for ts in times if ts >= plan.ts]
    joins = history.joined.get(key, set())
    restores = [s.ts - s.step_time for (job, generation, _), s in history.restores.items()
                if (job, generation) == key]
    return Milestones(
        fault=opened.first_ts, decided=opened.ts, on_kafka=published, planned=plan.ts,
        stopped=max(stops, default=None), started=None if done is None else done.ts,
        joined=max(joins, default=None), restored=max(restores, default=None), stepped=stepped)


def phases(marks: Milestones) -> tuple[Phase, ...]:
    """The phases between the milestones reached, each from the one before it; a milestone not in
    the log (no rank left to stop, a generation that restored nothing) folds into the next phase.
    Empty until the job's first step after the repair."""
    if marks.stepped is None:
        return ()
    out, since = [], marks.fault
    for (name, ends, _), ts in zip(PHASES, marks[1:], strict=True):
        if ts is None:
            continue
        out.append(Phase(name, ends, ts, max(0.0, ts - since)))
        since = max(since, ts)
    return tuple(out)


def describe(found: tuple[Phase, ...]) -> str:
    """One line: `detect 1.00 s | publish 0.01 s | ... | total 4.80 s`."""
    total = sum(p.seconds for p in found)
    return " | ".join([*(f"{p.name} {p.seconds:.2f} s" for p in found), f"total {total:.2f} s"])
