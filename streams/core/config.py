"""The detector's one configuration object: frozen, nested by concern, validated when built.

Defaults follow TAXONOMY.md; docs/detection.md explains each choice.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from trainmedic.schemas.bounds import MAX_TS


def _positive(owner: object, *names: str) -> None:
    for name in names:
        if not getattr(owner, name) > 0:
            raise ValueError(f"{type(owner).__name__}.{name} must be > 0")


@dataclass(frozen=True)
class HeartbeatConfig:
    """A node is lost after `missed` promised intervals without telemetry, never sooner
    than `min_timeout_s` (a 0.1 s heartbeat must not turn a GC pause into a SEV1)."""

    missed: float = 3.0
    min_timeout_s: float = 3.0

    def __post_init__(self) -> None:
        _positive(self, "min_timeout_s")
        if self.missed < 1:
            raise ValueError("HeartbeatConfig.missed must be >= 1 interval")

    def timeout_s(self, interval: float) -> float:
        return max(self.missed * interval, self.min_timeout_s)


@dataclass(frozen=True)
class GpuConfig:
    """GPU silence (gpu_lost) and thermal (WARN) rules. A GPU is overdue after 1.5 sample
    intervals without a sample, and lost after `silence_s` while its host still reports."""

    sample_interval_s: float = 1.0
    silence_s: float = 5.0
    temp_limit_c: float = 90.0
    thermal_sustain_s: float = 15.0
    thermal_clear_s: float = 30.0
    healthy_s: float = 60.0  # a GPU fault resolves once every GPU of its node reports clean this long

    def __post_init__(self) -> None:
        _positive(self, "sample_interval_s", "silence_s", "temp_limit_c", "thermal_sustain_s",
                  "thermal_clear_s", "healthy_s")
        if self.silence_s <= 1.5 * self.sample_interval_s:
            raise ValueError("GpuConfig.silence_s must exceed 1.5 sample intervals")


@dataclass(frozen=True)
class HangConfig:
    """A job hangs when no rank steps for max(floor_s, factor x median step time).

    The first `warmup_steps` steps (compile, data loading) never enter the median, and until
    `min_samples` step times are known the threshold is `warmup_s`."""

    factor: float = 3.0
    floor_s: float = 20.0
    warmup_s: float = 600.0
    warmup_steps: int = 2
    min_samples: int = 3
    window_steps: int = 32

    def __post_init__(self) -> None:
        _positive(self, "floor_s", "warmup_s", "min_samples", "window_steps")
        if self.factor <= 1:
            raise ValueError("HangConfig.factor must be > 1")
        if self.warmup_steps < 0:
            raise ValueError("HangConfig.warmup_steps must be >= 0")
        if self.min_samples > self.window_steps:
            raise ValueError("HangConfig.min_samples must be <= window_steps")
        if self.warmup_s < self.floor_s:
            raise ValueError("HangConfig.warmup_s must be >= floor_s")


@dataclass(frozen=True)
class StragglerConfig:
    """A rank whose median step time exceeds `ratio` x the job's median rank, at
    `sustain_checks` checks in a row (one every `check_s`), is a straggler."""

    ratio: float = 1.5
    window_steps: int = 20
    check_s: float = 10.0
    sustain_checks: int = 3
    min_ranks: int = 3

    def __post_init__(self) -> None:
        _positive(self, "window_steps", "check_s", "sustain_checks")
        if self.ratio <= 1:
            raise ValueError("StragglerConfig.ratio must be > 1")
        if self.min_ranks < 3:
            raise ValueError("StragglerConfig.min_ranks must be >= 3 (a median needs peers)")


@dataclass(frozen=True)
class CorrelationConfig:
    """How long a job's failure evidence waits for a more specific root cause.

    A rank's own fault (exception, crash) waits `evidence_hold_s`; a collective or network
    symptom waits `symptom_hold_s`; both wait longer while a node of the job is overdue."""

    evidence_hold_s: float = 1.0
    symptom_hold_s: float = 2.0
    evidence_lines: int = 20

    def __post_init__(self) -> None:
        _positive(self, "evidence_lines")
        if self.evidence_hold_s < 0 or self.symptom_hold_s < 0:
            raise ValueError("CorrelationConfig holds must be >= 0")
        if self.evidence_hold_s > self.symptom_hold_s:
            raise ValueError("CorrelationConfig.evidence_hold_s must be <= symptom_hold_s")


@dataclass(frozen=True)
class LinkConfig:
    """A link flap stays one incident until the link has been up for `stable_s`."""

    stable_s: float = 30.0

    def __post_init__(self) -> None:
        _positive(self, "stable_s")


@dataclass(frozen=True)
class EscalationConfig:
    """TAXONOMY.md: SEV3 x3 on a job in 10 min -> SEV2 (link flaps: x3 separate episodes);
    SEV2 x2 on a node in 30 min -> SEV1, unless the repeat follows the job (its own error
    signature again): that stays the job's SEV2. docs/detection.md, "Escalation"."""

    sev3_count: int = 3
    sev3_window_s: float = 600.0
    sev2_count: int = 2
    sev2_window_s: float = 1800.0
    episode_s: float = 180.0  # link flaps within this of their episode's first count once

    def __post_init__(self) -> None:
        _positive(self, "sev3_window_s", "sev2_window_s", "episode_s")
        if self.sev3_count < 2 or self.sev2_count < 2:
            raise ValueError("EscalationConfig counts must be >= 2")
        if self.episode_s * (self.sev3_count - 1) >= self.sev3_window_s:
            raise ValueError("EscalationConfig: episode_s x (sev3_count - 1) must be < sev3_window_s, "
                             "or separate episodes could never escalate")


@dataclass(frozen=True)
class GapConfig:
    """Many nodes quiet at once is a telemetry gap (the telemetry stopped reaching the detector),
    not many lost nodes: one WARN `telemetry_gap`, no `node_lost`. When a node's heartbeat
    timeout passes, the nodes quiet then (silent for `quiet_missed` of their intervals or more)
    are counted; more than max(`min_nodes`, `share` of the nodes that report) is a gap. A node
    still silent `judge_after_s` after it joined the gap, while the detector reads everything
    there is, is judged alone (`node_lost`): a gap that long is nodes gone, not telemetry.
    docs/detection.md, "Telemetry gaps", explains the defaults."""

    share: float = 0.2
    min_nodes: int = 2
    quiet_missed: float = 1.5
    judge_after_s: float = 120.0

    def __post_init__(self) -> None:
        if not 0 <= self.share < 1:
            raise ValueError("GapConfig.share must be in [0, 1)")
        if self.min_nodes < 1:
            raise ValueError("GapConfig.min_nodes must be >= 1")
        if self.quiet_missed < 1:
            raise ValueError("GapConfig.quiet_missed must be >= 1 interval")
        if self.judge_after_s <= 0:
            raise ValueError("GapConfig.judge_after_s must be > 0")

    def is_gap(self, quiet: int, nodes: int) -> bool:
        """Whether `quiet` nodes silent at once, out of `nodes`, is a gap in the telemetry."""
        return quiet > max(self.min_nodes, self.share * nodes)


@dataclass(frozen=True)
class LimitsConfig:
    """What job reports can raise, in event time (docs/detection.md, "Storms"): at most
    `node_incidents` incidents from job reports per node and `job_incidents` per job within
    `window_s`; the next opens one `storm` for it and the others are suppressed until `window_s`
    after it. A node follows at most `node_jobs` started jobs. Node evidence is never limited."""

    node_incidents: int = 10
    job_incidents: int = 5
    window_s: float = 60.0
    node_jobs: int = 64

    def __post_init__(self) -> None:
        _positive(self, "window_s")
        for name in ("node_incidents", "job_incidents", "node_jobs"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"LimitsConfig.{name} must be a whole number >= 1")


@dataclass(frozen=True)
class DetectorConfig:
    """Everything the detection core can be tuned by."""

    heartbeat: HeartbeatConfig = field(default_factory=HeartbeatConfig)
    gpu: GpuConfig = field(default_factory=GpuConfig)
    hang: HangConfig = field(default_factory=HangConfig)
    straggler: StragglerConfig = field(default_factory=StragglerConfig)
    correlation: CorrelationConfig = field(default_factory=CorrelationConfig)
    link: LinkConfig = field(default_factory=LinkConfig)
    escalation: EscalationConfig = field(default_factory=EscalationConfig)
    gap: GapConfig = field(default_factory=GapConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)

    def __post_init__(self) -> None:
        # Bounded like event times: then every product of a setting and an event's value (a hang
        # threshold: factor x step time) stays finite, and so does the state saved as JSON.
        for part in fields(self):
            section = getattr(self, part.name)
            for item in fields(section):
                value = getattr(section, item.name)
                if isinstance(value, int | float) and not abs(value) <= MAX_TS:
                    raise ValueError(f"{part.name}.{item.name} must be a number of at most {MAX_TS:g}, "
                                     f"not {value}")
        if self.correlation.symptom_hold_s >= self.hang.floor_s:
            raise ValueError("correlation.symptom_hold_s must be < hang.floor_s")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DetectorConfig:
        """Build from nested plain data (JSON/YAML); unknown sections or keys are errors."""
        unknown = set(data) - set(SECTIONS)
        if unknown:
            raise ValueError(f"unknown config sections: {', '.join(sorted(unknown))}")
        parts = {}
        for name, section in data.items():
            kind = SECTIONS[name]
            bad = set(section) - {f.name for f in fields(kind)}
            if bad:
                raise ValueError(f"unknown keys in {name}: {', '.join(sorted(bad))}")
            parts[name] = kind(**section)
        return cls(**parts)


# Section name -> its config class, taken from DetectorConfig's fields: the one list of the core's tuning
# sections, which the service's config (streams/config.py) makes its YAML keys.
SECTIONS: dict[str, type] = {part.name: part.default_factory for part in fields(DetectorConfig)}
