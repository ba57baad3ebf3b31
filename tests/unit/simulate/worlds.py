"""Small clusters, faults and a trainmedic world the simulator's tests share."""

from __future__ import annotations

import random

from trainmedic.simulate.faults import Fault
from trainmedic.simulate.healer import Healer
from trainmedic.simulate.scenario import Scenario
from trainmedic.simulate.world import World, inject

HOUR = 3600.0


def cluster(nodes: int, *, job_nodes: int = 4, min_nodes: int = 3, **trainmedic: object) -> Scenario:
    """One job of `job_nodes` (shrinkable to `min_nodes`) on `nodes` nodes, leaves of 4, a 2 s step."""
    return Scenario.model_validate({
        "name": "t", "duration_days": 1, "cluster": {"nodes": nodes, "nodes_per_switch": 4},
        "jobs": [{"id": "job", "nodes": job_nodes, "min_nodes": min_nodes, "step_s": 2.0}],
        "policies": {"trainmedic": trainmedic}})


def gpu_lost(ts: float, node: str = "n1", repair_s: float = 2 * HOUR) -> Fault:
    return Fault(ts=ts, node=node, category="gpu_lost", cause="faulty GPU", repair_s=repair_s)


def process_exits(seed: int, days: float, mean_s: float = 3 * HOUR, nodes: int = 4) -> list[Fault]:
    """Process faults (a rank killed) on the first `nodes` nodes, a Poisson process of mean `mean_s`."""
    rng, ts, faults = random.Random(seed), 0.0, []
    while (ts := ts + rng.expovariate(1 / mean_s)) < days * 86_400:
        faults.append(Fault(ts=ts, node=f"n{rng.randrange(nodes)}", category="process_exit", cause="killed"))
    return faults


def healed(scenario: Scenario, faults: list[Fault], until: float) -> tuple[World, Healer]:
    """The trainmedic policy run on `faults` up to `until`: the world and the healer, to look inside."""
    world = World.of(scenario)
    healer = Healer(world, scenario.policies.trainmedic)
    world.at(0.0, healer.start)
    inject(world, healer, faults)
    world.run_until(until, lambda t: None, [])
    return world, healer
