"""The detector's state: plain data that round-trips through JSON, split by key (nodes, jobs,
incidents, escalation history); the deadline heap is rebuilt from it (docs/detection.md, "State").
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, NamedTuple

import msgspec


class Clue(NamedTuple):
    """One piece of job-level evidence. Tuple order is the root-cause order: most specific,
    then earliest, then lowest rank."""

    specificity: int
    ts: float
    rank: int  # -1 when the evidence names no rank (an application Xid)
    node: str
    category: str
    line: str
    signature: str  # what the failure looks like (taxonomy.error_signature), for escalation


@dataclass(slots=True)
class GpuState:
    last_ts: float
    ecc_dbe: int | None = None
    nvlink_errors: int | None = None
    hot_since: float | None = None
    cool_since: float | None = None
    thermal_id: str | None = None
    silent: bool = False


@dataclass(slots=True)
class NicState:
    up: bool
    down_ts: float | None = None
    up_ts: float | None = None
    flap_id: str | None = None


@dataclass(slots=True)
class NodeState:
    last_seen: float
    interval: float | None = None  # promised heartbeat interval; None: never heartbeated
    lost_since: float | None = None
    hw_id: str | None = None  # the node's open hardware incident (one at a time)
    gap_id: str | None = None  # the open telemetry_gap this node is quiet in
    gap_until: float | None = None  # in a gap: judged alone from then (judge_after_s, or telemetry flows)
    leaving: bool = False  # its last heartbeat announced a planned shutdown: its silence is expected
    fault_ts: float | None = None  # the latest hardware evidence of its open incident (None: its open time)
    jobs: dict[str, list[int]] = field(default_factory=dict)  # job -> ranks on this node
    gpus: dict[int, GpuState] = field(default_factory=dict)
    nics: dict[str, NicState] = field(default_factory=dict)


@dataclass(slots=True)
class RankState:
    node: str
    step: int = -1
    step_ts: float = 0.0
    errored: bool = False  # reported its own worker_error at this generation
    exited: bool = False  # its process ended in a failure (after any other exit it leaves the job)
    times: list[float] = field(default_factory=list)  # recent step times (straggler window)
    slow_checks: int = 0
    straggler_id: str | None = None


@dataclass(slots=True)
class Group:
    """A job's failure evidence waiting for its root cause (see correlation.py)."""

    first_ts: float
    release: float
    best: Clue
    ranks: list[int] = field(default_factory=list)  # every rank that reported, sorted
    lines: list[str] = field(default_factory=list)
    dropped: int = 0


@dataclass(slots=True)
class JobWatch:
    """What the detector follows of one job at its current generation: its ranks, step
    progress and hang threshold, and the failure evidence waiting for correlation."""

    gen: int
    last_progress: float
    # a worker_start of it was seen; False: known only from other reports (a saved state from
    # before this field followed its jobs from their starts: True)
    started: bool = True
    ranks: dict[int, RankState] = field(default_factory=dict)
    max_step: int = -1
    steps_seen: int = 0
    first_step_ts: float | None = None  # when this generation's first step was reported
    step_times: list[float] = field(default_factory=list)  # one per job step, for the median
    threshold: float = 0.0  # current hang threshold, seconds
    hang_floor_s: float | None = None  # the job's own floor, from its worker_start (None: the config's)
    finishing: bool = False  # a rank exited 0: the job is ending, silence is expected
    fatal_id: str | None = None  # the SEV1/SEV2 incident that owns this generation's failure
    open_ids: list[str] = field(default_factory=list)  # incidents cleared by this job's steps
    group: Group | None = None
    straggler_due: float | None = None
    # node -> the ranks of this generation a coordinator-signed placement put there (placement.py); None:
    # not known (no coordinator keys, or followed from before the detector checked placements), not checked
    placed: dict[str, frozenset[int]] | None = None


@dataclass(slots=True)
class OpenIncident:
    id: str
    category: str
    severity: str
    job: str | None
    node: str | None
    ranks: list[int]
    first_ts: float
    ts: float
    evidence: list[str]
    dropped: int = 0
    jobs: dict[str, int] = field(default_factory=dict)  # job -> generation it was opened at
    step: int = -1  # the job's step when opened (PROGRESS resolution)
    steps: int | None = None  # its job's steps in the generation when opened (None: no job watched)
    stepping_since: float | None = None  # and when that generation's first step was
    gpu: int | None = None
    nic: str | None = None
    suppressed: bool = False  # held by a storm (limits.py): followed as any other, emitted once released


@dataclass(slots=True)
class Storm:
    """A node or job past its limit (limits.py): its `storm` incident, open until `until`, how
    many incidents it suppressed and how many worker reports of more jobs on its node were not followed."""

    id: str
    until: float
    suppressed: int = 0
    refused: int = 0


@dataclass(slots=True)
class DetectorState:
    clock: float = 0.0
    nodes: dict[str, NodeState] = field(default_factory=dict)
    jobs: dict[str, JobWatch] = field(default_factory=dict)
    incidents: dict[str, OpenIncident] = field(default_factory=dict)
    sev3_history: dict[str, list[float]] = field(default_factory=dict)  # "category|job" -> ts
    sev2_history: dict[str, list[float]] = field(default_factory=dict)  # node -> ts
    # job -> [ts, node, signature] of its recent SEV2 failures: a repeat follows the job
    job_errors: dict[str, list[list]] = field(default_factory=dict)
    # job -> the generation it ended at, the oldest first: its later reports of it are refused (job_end.py)
    ended: dict[str, int] = field(default_factory=dict)
    # "node:NAME" / "job:NAME" -> when incidents from job reports opened on it, within limits.window_s
    rates: dict[str, list[float]] = field(default_factory=dict)
    storms: dict[str, Storm] = field(default_factory=dict)  # the same keys -> its storm (limits.py)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready plain data (dict keys become strings)."""
        return _plain(self)

    def to_msgpack(self) -> bytes:
        """The state as msgpack, encoded in C in one pass without building the plain copy first:
        checkpoints encode the whole state (bench/detector_core.py compares it with JSON). Dict keys
        keep their type; `from_dict` takes what it decodes to, as it takes `to_dict()`."""
        return _msgpack.encode(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DetectorState:
        return cls(
            clock=data["clock"],
            nodes={k: _node(v) for k, v in data["nodes"].items()},
            jobs={k: _job(v) for k, v in data["jobs"].items()},
            incidents={k: OpenIncident(**v) for k, v in data["incidents"].items()},
            sev3_history=data["sev3_history"],
            sev2_history=data["sev2_history"],
            job_errors=data["job_errors"],
            ended=data.get("ended", {}),  # a checkpoint before format 7 remembers no ended job
            rates=data.get("rates", {}),  # before format 8: nothing counted, no storm
            storms={k: Storm(**v) for k, v in data.get("storms", {}).items()},
        )


_msgpack = msgspec.msgpack.Encoder()


def _plain(obj: Any) -> Any:
    if is_dataclass(obj):
        return {f.name: _plain(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, set | frozenset):
        return sorted(obj)
    return obj


def _node(d: dict[str, Any]) -> NodeState:
    return NodeState(**{
        **d,
        "gpus": {int(k): GpuState(**v) for k, v in d["gpus"].items()},
        "nics": {k: NicState(**v) for k, v in d["nics"].items()},
    })


def _job(d: dict[str, Any]) -> JobWatch:
    group = d["group"]
    if group is not None:
        group = Group(**{**group, "best": Clue(*group["best"])})
    placed = d.get("placed")  # before format 9: not known
    return JobWatch(**{
        **d,
        "ranks": {int(k): RankState(**v) for k, v in d["ranks"].items()},
        "group": group,
        "placed": None if placed is None else {node: frozenset(ranks) for node, ranks in placed.items()},
    })
