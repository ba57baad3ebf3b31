"""Hang rule helpers: an adaptive per-job threshold (over the job's highest step, with the job's own
floor when its spec sets one), and which ranks stopped first (docs/detection.md, "Hang").
"""

from __future__ import annotations

from trainmedic.streams.core.config import HangConfig
from trainmedic.streams.core.state import JobWatch


def record_step_time(job: JobWatch, step_time: float, cfg: HangConfig) -> None:
    """Learn from one job step (called when the job's highest step advances). The first
    `warmup_steps` steps (compile, data loader warm-up) are not typical and are skipped."""
    job.steps_seen += 1
    if job.steps_seen <= cfg.warmup_steps:
        return
    times = job.step_times
    times.append(step_time)
    if len(times) > cfg.window_steps:
        del times[0]
    job.threshold = threshold(job, cfg)


def threshold(job: JobWatch, cfg: HangConfig) -> float:
    """No step for this long is a hang: max(floor, factor x median step), or the warm-up threshold
    while fewer than `min_samples` step times are known."""
    if len(job.step_times) < cfg.min_samples:
        return warmup_threshold(job, cfg)
    return max(floor(job, cfg), cfg.factor * median(job.step_times))


def floor(job: JobWatch, cfg: HangConfig) -> float:
    """The job's own hang floor (its spec's failure.hang_floor_s, from its worker_start) or the config's."""
    return cfg.floor_s if job.hang_floor_s is None else job.hang_floor_s


def warmup_threshold(job: JobWatch, cfg: HangConfig) -> float:
    """Until step times are known: the warm-up threshold, or the job's floor when that is longer."""
    return max(cfg.warmup_s, floor(job, cfg))


def describe_threshold(job: JobWatch, cfg: HangConfig) -> str:
    if len(job.step_times) < cfg.min_samples:
        return f"warm-up threshold {warmup_threshold(job, cfg):g}s"
    whose = "floor" if job.hang_floor_s is None else "the job's floor"
    return (f"threshold {job.threshold:.1f}s = max({whose} {floor(job, cfg):g}s, "
            f"{cfg.factor:g} x median step {median(job.step_times):.2f}s)")


def stopped_first(job: JobWatch) -> tuple[list[int], int, int]:
    """(ranks at the lowest step, that step, the highest step any rank reached). When every
    rank stopped at the same step the first list holds them all."""
    low = min(rank.step for rank in job.ranks.values())
    high = max(rank.step for rank in job.ranks.values())
    return sorted(r for r, rank in job.ranks.items() if rank.step == low), low, high


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
