"""What a rank may report through its executor: only about itself, at the executor's time, within a
rate; pure, time passed in (docs/security.md, "The job cannot steer the healer").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from pydantic import Field, TypeAdapter

from trainmedic.schemas import WorkerFailed, WorkerStarted, WorkerStepped
from trainmedic.schemas.codec import InvalidEvent, decode
from trainmedic.schemas.telemetry import WorkerWaiting, last_lines

MAX_LINE = 64 * 1024  # bytes of one report: an error and a traceback of 4,096 characters each, escaped, fit
MAX_TEXT = 4_096  # characters of a report's free text (error, restore warning): the hook's own bound

Report = WorkerStarted | WorkerStepped | WorkerFailed | WorkerWaiting  # the last for its executor alone
REPORT = TypeAdapter(Annotated[Report, Field(discriminator="type")])


@dataclass(frozen=True, slots=True)
class LaunchedRank:
    """A rank as this executor launched it: who its reports must say it is."""

    job: str
    generation: int
    rank: int
    world_size: int
    local_rank: int | None = None  # None for a rank adopted from a previous executor
    hang_floor_s: float | None = None  # the job's own, from its spec: a rank cannot choose it
    submission: str | None = None  # whose directory is its HOME (None: adopted, not known)
    # the coordinator's signed placement (JSON) of its generation here, which its worker_start and
    # worker_exit carry (docs/detection.md, "Generations come from the coordinator"); None: not known
    placement: str | None = None


@dataclass(frozen=True, slots=True)
class ReportLimits:
    """Per rank: reports and bytes a second on average and in a burst; how far a step may leap ahead."""

    rate_per_s: float = 200.0
    burst: int = 1_000
    bytes_per_s: float = 256 * 1024.0  # a step report is ~250 bytes: 200 a second are 50 KB
    byte_burst: int = 1024 * 1024
    max_step_leap: int = 1_000_000


@dataclass(frozen=True, slots=True)
class Refused:
    """A report that does not go on: `label` for the metric, `reason` for the log."""

    label: str
    reason: str


@dataclass(slots=True)
class RankReports:
    """What one rank reported so far: its rate bucket and its last step."""

    launched: LaunchedRank
    tokens: float
    byte_tokens: float
    refilled_at: float
    last_step: int | None = None
    refused: dict[str, int] = field(default_factory=dict)

    @classmethod
    def fresh(cls, launched: LaunchedRank, limits: ReportLimits, now: float) -> RankReports:
        return cls(launched, float(limits.burst), float(limits.byte_burst), now)


def check(line: bytes, reports: RankReports, *, node: str, pid: int, now: float,
          limits: ReportLimits) -> Report | Refused:
    """The event to publish for one line from process `pid`, or why not. Updates `reports`."""
    if len(line) > MAX_LINE:
        return Refused("oversized", f"a report of {len(line)} bytes (at most {MAX_LINE})")
    if not _take_tokens(reports, now, limits, len(line)):
        return Refused("rate", f"over {limits.rate_per_s:g} reports or {limits.bytes_per_s:g} bytes a second")
    try:
        event = decode(line, REPORT)
    except InvalidEvent as err:
        return Refused("malformed", str(err)[:200])
    except RecursionError:
        return Refused("malformed", "nested too deeply")
    launched = reports.launched
    for what, said, known in (("job", event.job, launched.job), ("node", event.node, node),
                              ("generation", event.generation, launched.generation),
                              ("rank", event.rank, launched.rank),
                              ("world_size", event.world_size, launched.world_size)):
        if said != known:
            return Refused(f"other_{what}", f"a report about {what} {said!r} from the {what} {known!r}")
    if isinstance(event, WorkerStepped):
        leap = _step_refused(event.step, reports.last_step, limits)
        if leap is not None:
            return leap
        reports.last_step = event.step
    # Only the contract's own fields go on (extras a rank adds, a `stopped` or a `local_rank` of its
    # choosing among them), with the executor's time, the pid and what the executor knows.
    kept = {name: getattr(event, name) for name in type(event).model_fields}
    for name in ("error", "restore_warning"):  # the schema allows a megabyte; a rank gets the hook's
        if isinstance(kept.get(name), str):
            kept[name] = kept[name][:MAX_TEXT]
    if isinstance(kept.get("traceback"), str):  # its end is what tells: the hook's bound, from the end
        kept["traceback"] = last_lines(kept["traceback"])
    stamped = {**kept, "ts": now, "pid": pid}
    if isinstance(event, WorkerStarted):
        stamped["hang_floor_s"] = launched.hang_floor_s
        stamped["placement"] = launched.placement  # the executor's, never one the rank wrote
    if launched.local_rank is not None:
        stamped["local_rank"] = launched.local_rank
    return type(event).model_construct(**stamped)


def _step_refused(step: int, last: int | None, limits: ReportLimits) -> Refused | None:
    if last is not None and step < last:
        return Refused("step_backwards", f"step {step} after step {last} of the same generation")
    if last is not None and step > last + limits.max_step_leap:
        return Refused("step_leap", f"step {step} leaps more than {limits.max_step_leap} past step {last}")
    return None


def _take_tokens(reports: RankReports, now: float, limits: ReportLimits, size: int) -> bool:
    elapsed = max(0.0, now - reports.refilled_at)
    reports.tokens = min(float(limits.burst), reports.tokens + elapsed * limits.rate_per_s)
    reports.byte_tokens = min(float(limits.byte_burst), reports.byte_tokens + elapsed * limits.bytes_per_s)
    reports.refilled_at = now
    if reports.tokens < 1.0 or reports.byte_tokens < size:
        return False
    reports.tokens -= 1.0
    reports.byte_tokens -= size
    return True
