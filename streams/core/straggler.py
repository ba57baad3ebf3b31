"""Straggler rule: a rank whose recent median step time is far above its peers'."""

from __future__ import annotations

from trainmedic.streams.core.config import StragglerConfig
from trainmedic.streams.core.hang import median
from trainmedic.streams.core.state import JobWatch


def record_rank_step(times: list[float], step_time: float, cfg: StragglerConfig) -> None:
    times.append(step_time)
    if len(times) > cfg.window_steps:
        del times[0]


def rank_medians(job: JobWatch, cfg: StragglerConfig) -> tuple[dict[int, float], float] | None:
    """(median step time of every rank with a full window, the median of those) or None when
    too few ranks have a full window to compare. Medians ignore an occasional slow step."""
    medians = {r: median(rank.times) for r, rank in job.ranks.items()
               if len(rank.times) >= cfg.window_steps}
    if len(medians) < cfg.min_ranks:
        return None
    return medians, median(list(medians.values()))
