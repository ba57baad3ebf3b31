"""The simulator against closed forms: restart-all's ETTR under exponential failures is the
renewal-reward expectation, and the Young/Daly checkpoint interval is where a sweep peaks.

The model (docs/simulation.md, "Checks"): a job runs until a failure (rate λ, exponential), is
down D = detection + restart, and resumes from its last checkpoint; a checkpoint is taken after
every c seconds of training and stalls it δ. A failure while the job is down changes nothing.
Per cycle (uptime X, then D) the kept work is c · ⌊X / (c + δ)⌋, so by renewal-reward

    ETTR = E[kept] / E[cycle] = c / ((e^{λ(c+δ)} − 1) · (1/λ + D)).
"""

from __future__ import annotations

import math
import random
import statistics

from trainmedic.simulate.faults import Fault
from trainmedic.simulate.run import simulate
from trainmedic.simulate.scenario import Scenario

HOUR = 3600.0


def scenario(*, interval_s: float, cost_s: float, detect_s: float, restart_s: float, days: float,
             nodes: int = 4) -> Scenario:
    return Scenario.model_validate({
        "name": "renewal", "duration_days": days, "cluster": {"nodes": nodes},
        "jobs": [{"id": "job", "nodes": nodes, "checkpoint": {"interval_s": interval_s, "cost_s": cost_s}}],
        "policies": {"restart_all": {"detect_s": detect_s, "restart": {"base_s": restart_s}}},
    })


def poisson(rate_per_s: float, duration_s: float, nodes: int, seed: int) -> list[Fault]:
    """Process faults (a restart cures them) at `rate_per_s` on the whole job."""
    rng, t, out = random.Random(seed), 0.0, []
    while (t := t + rng.expovariate(rate_per_s)) < duration_s:
        out.append(Fault(ts=t, node=f"n{rng.randrange(nodes)}", category="software_error", cause="bug"))
    return out


def renewal_ettr(rate: float, interval_s: float, cost_s: float, down_s: float) -> float:
    return interval_s / ((math.exp(rate * (interval_s + cost_s)) - 1) * (1 / rate + down_s))


def test_restart_all_matches_the_renewal_reward_expectation():
    rate, c, delta, detect, restart = 1 / (6 * HOUR), 1800.0, 120.0, 600.0, 900.0
    world = scenario(interval_s=c, cost_s=delta, detect_s=detect, restart_s=restart, days=200)
    runs = [simulate(world, "restart-all", poisson(rate, world.duration_s, 4, seed), samples=10).ettr
            for seed in range(8)]
    expected = renewal_ettr(rate, c, delta, detect + restart)
    mean, error = statistics.fmean(runs), statistics.stdev(runs) / math.sqrt(len(runs))
    # 4 standard errors, plus the one bias of a finite run: the work since the last checkpoint at
    # the end is kept (at most c per run)
    assert abs(mean - expected) < 4 * error + c / world.duration_s, (mean, expected, error)
    assert 0.6 < expected < 0.9  # a regime where failures matter: the check has teeth


def test_the_young_daly_interval_is_where_a_sweep_of_intervals_peaks():
    rate, delta, down = 1 / (4 * HOUR), 300.0, 1200.0
    young = math.sqrt(2 * delta / rate)  # Young (1974); Daly's refinement differs by < δ here
    factors = (0.25, 0.5, 1.0, 2.0, 4.0)
    ettr = {}
    for factor in factors:  # the same faults for every interval: only the interval differs
        world = scenario(interval_s=factor * young, cost_s=delta, detect_s=down, restart_s=0.0, days=400)
        ettr[factor] = statistics.fmean(
            simulate(world, "restart-all", poisson(rate, world.duration_s, 4, seed), samples=10).ettr
            for seed in range(4))
    assert max(ettr, key=ettr.get) == 1.0, ettr
    # and the closed form agrees on the shape the sweep found
    closed = {f: renewal_ettr(rate, f * young, delta, down) for f in factors}
    assert max(closed, key=closed.get) == 1.0
