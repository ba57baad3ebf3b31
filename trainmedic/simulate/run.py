"""Run the policies on one trace, and on several seeds: the Python API of `trainmedic simulate`
(`run.compare(scenario.load(path), seeds=[1, 2, 3])`); every policy of one seed sees exactly the same
faults and repair times (docs/simulation.md).
"""

from __future__ import annotations

import gc
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from trainmedic.simulate.baseline import Elastic, RestartAll
from trainmedic.simulate.faults import Fault
from trainmedic.simulate.healer import Healer
from trainmedic.simulate.progress import LOSSES
from trainmedic.simulate.scenario import Scenario
from trainmedic.simulate.world import Policy, World, cluster_nodes, inject

POLICIES: dict[str, Callable[[World, Scenario], Policy]] = {
    "restart-all": lambda world, s: RestartAll(world, s.policies.restart_all),
    "elastic": lambda world, s: Elastic(world, s.policies.elastic),
    "trainmedic": lambda world, s: Healer(world, s.policies.trainmedic),
}
BASELINE = "restart-all"


@dataclass
class Outcome:
    """One policy on one trace."""

    policy: str
    ettr: float  # goodput / nominal GPU-time, over every job (GPU-weighted)
    waf_accumulated: float  # Σ weight × FLOP done and kept: the paper's accumulated WAF
    goodput_gpu_h: float
    lost_gpu_h: dict[str, float]
    faults: int  # faults that stopped a job
    gave_up: int  # times the coordinator gave up on a job (a person restarted it, or it stayed down)
    timeline: list[tuple[float, float]]  # (seconds, accumulated WAF so far)


def trace(scenario: Scenario, seed: int) -> list[Fault]:
    """The scenario's failure trace for `seed`."""
    from trainmedic.simulate import traces

    rng = random.Random(seed)
    nodes = [node.id for node in cluster_nodes(scenario)]
    model = scenario.failures
    if model.replay is not None:
        return traces.from_incident_log(model.replay, nodes, model.repair_h, rng)
    return traces.generate(model, nodes, scenario.cluster.gpus_per_node, scenario.duration_s, rng)


def simulate(scenario: Scenario, policy: str, faults: Sequence[Fault], *, samples: int = 200,
             progress: Callable[[float], None] | None = None) -> Outcome:
    """`policy` over `faults` for the scenario's duration; `progress(fraction done)` at each sample."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")
    world = World.of(scenario)
    actor = POLICIES[policy](world, scenario)
    gc.collect()
    gc.freeze()  # the cluster's many long-lived objects: a full collection in the run would walk them all
    end = scenario.duration_s
    world.at(0.0, actor.start)
    inject(world, actor, [fault for fault in faults if fault.ts < end])
    timeline: list[tuple[float, float]] = []

    def sample(t: float) -> None:
        for book in world.books.values():
            book.advance(t)
        timeline.append((t, sum(book.weighted_work() for book in world.books.values())))
        if progress is not None:
            progress(t / end)

    try:
        world.run_until(end, sample, [end * (i + 1) / samples for i in range(samples)])
    finally:
        gc.unfreeze()
    goodput, lost = 0.0, dict.fromkeys(LOSSES, 0.0)
    nominal = 0.0
    for book in world.books.values():
        book.advance(end)
        good, losses = book.gpu_hours()
        goodput += good
        nominal += book.nominal_gpus * end / 3600.0
        for cause, hours in losses.items():
            lost[cause] += hours
    return Outcome(policy=policy, ettr=goodput / nominal, waf_accumulated=timeline[-1][1],
                   goodput_gpu_h=goodput, lost_gpu_h=lost,
                   faults=sum(book.faults for book in world.books.values()),
                   gave_up=len(getattr(actor, "gave_up", ())), timeline=timeline)


# Student's t, two-sided 95 %, by degrees of freedom (seeds - 1): a mean over the few seeds a
# scenario runs is not normal; past 30 the normal 1.96 is within 5 %.
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
       2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
       2.045, 2.042)


def t95(df: int) -> float:
    return T95[df - 1] if df <= len(T95) else 1.96


@dataclass
class Summary:
    """One policy over every seed: means, and 95 % confidence half-widths (Student's t, over seeds)."""

    policy: str
    runs: list[Outcome]
    ratios: list[float]  # accumulated WAF / restart-all's, per seed
    mean: dict[str, float] = field(default_factory=dict)
    ci95: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        figures = {"ettr": [r.ettr for r in self.runs],
                   "waf_accumulated": [r.waf_accumulated for r in self.runs],
                   "goodput_gpu_h": [r.goodput_gpu_h for r in self.runs], "ratio_to_restart_all": self.ratios,
                   **{f"lost.{c}": [r.lost_gpu_h[c] for r in self.runs] for c in LOSSES}}
        for name, values in figures.items():
            self.mean[name] = statistics.fmean(values)
            n = len(values)
            self.ci95[name] = t95(n - 1) * statistics.stdev(values) / n ** 0.5 if n > 1 else 0.0


@dataclass
class Report:
    scenario: Scenario
    seeds: list[int]
    policies: dict[str, Summary]
    faults: list[int]  # faults in each seed's trace


Progress = Callable[[str, float], None]  # (what runs: "seed 1 trainmedic", fraction of all the work done)


def compare(scenario: Scenario, seeds: Sequence[int], policies: Sequence[str] = tuple(POLICIES), *,
            samples: int = 200, progress: Progress | None = None) -> Report:
    """Every policy on every seed's trace (restart-all always, as the baseline of the ratios)."""
    chosen = [BASELINE, *(p for p in policies if p != BASELINE)]
    runs: dict[str, list[Outcome]] = {p: [] for p in chosen}
    counts = []
    total = len(seeds) * len(chosen)
    for i, seed in enumerate(seeds):
        faults = trace(scenario, seed)
        counts.append(len(faults))
        for j, policy in enumerate(chosen):
            done = i * len(chosen) + j
            step = None if progress is None else (
                lambda f, what=f"seed {seed} {policy}", done=done: progress(what, (done + f) / total))
            runs[policy].append(simulate(scenario, policy, faults, samples=samples, progress=step))
    base = runs[BASELINE]
    summaries = {p: Summary(p, outcomes, [o.waf_accumulated / b.waf_accumulated
                                          for o, b in zip(outcomes, base, strict=True)])
                 for p, outcomes in runs.items()}
    return Report(scenario=scenario, seeds=list(seeds), policies=summaries, faults=counts)
