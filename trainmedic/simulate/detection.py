"""How long trainmedic takes from a fault to its incident on Kafka, per category: a table from the
detector's own configuration, the worker's collective timeout and the pipeline's latency; a scenario's
`policies.trainmedic.detect_s` overrides any row (docs/simulation.md, "The policies").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from trainmedic.runtime.env import DEFAULT_TIMEOUT_S
from trainmedic.streams.core.config import DetectorConfig

Rule = Callable[[DetectorConfig, float], float]  # (config, the job's step time) -> seconds
SAMPLE_S = 1.0  # GPU and host telemetry interval (producers' `interval_s` default)

# A fault seen on the next periodic sample waits half a sampling interval on average.
RULES: dict[str, tuple[str, Rule]] = {
    "gpu_lost": ("the next NVML sample (an Xid 79 event)", lambda c, _: c.gpu.sample_interval_s / 2),
    "gpu_ecc": ("the next NVML sample (ECC counter or Xid)", lambda c, _: c.gpu.sample_interval_s / 2),
    "gpu_driver": ("the next NVML sample (Xid)", lambda c, _: c.gpu.sample_interval_s / 2),
    "nvlink": ("the next NVML sample (Xid 74 or NVLink counter)", lambda c, _: c.gpu.sample_interval_s / 2),
    "node_lost": ("heartbeat timeout: max(missed x interval, min_timeout_s)",
                  lambda c, _: c.heartbeat.timeout_s(SAMPLE_S)),
    "process_exit": ("the rank's exit, held evidence_hold_s for a root cause",
                     lambda c, _: c.correlation.evidence_hold_s),
    "software_error": ("the rank's exception, held evidence_hold_s",
                       lambda c, _: c.correlation.evidence_hold_s),
    "cuda_error": ("the rank's CUDA error, held evidence_hold_s", lambda c, _: c.correlation.evidence_hold_s),
    "hang": ("no step for max(hang floor, 3 x median step)",
             lambda c, step_s: max(c.hang.floor_s, 3 * step_s)),
    "nccl_error": ("the rank's collective timeout (the worker runtime's default), then symptom_hold_s",
                   lambda c, _: DEFAULT_TIMEOUT_S + c.correlation.symptom_hold_s),
    "network": ("the peer's connection error, held symptom_hold_s",
                lambda c, _: c.correlation.symptom_hold_s),
    "link_flap": ("the link's down and up (a flap lasts about 2 s)", lambda c, _: 2.0),
}


def detect_s(category: str, step_s: float, pipeline_s: float, overrides: Mapping[str, float],
             config: DetectorConfig | None = None) -> float:
    """Seconds from a fault of `category` to its incident on Kafka, for a job stepping every `step_s`."""
    if category in overrides:
        return overrides[category]
    if category not in RULES:
        raise ValueError(f"no detection rule for category {category!r} (known: {', '.join(sorted(RULES))})")
    return RULES[category][1](config or DetectorConfig(), step_s) + pipeline_s
