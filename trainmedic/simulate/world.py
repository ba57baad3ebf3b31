"""The simulated world every policy acts in: the clock and its queue, the nodes and which are broken,
and each job's books (`progress.py`); policies decide, the world keeps time and the facts, faults
and repairs included (docs/simulation.md, "The model").
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from trainmedic.simulate.faults import Fault
from trainmedic.simulate.progress import JobProgress, default_table
from trainmedic.simulate.scenario import Scenario


@dataclass(frozen=True)
class Node:
    id: str
    switch: str


def cluster_nodes(scenario: Scenario) -> list[Node]:
    """The cluster's nodes in order, on leaf switches of `nodes_per_switch`."""
    cluster = scenario.cluster
    width = len(str(cluster.nodes - 1))
    return [Node(id=f"n{i:0{width}d}", switch=f"leaf{i // cluster.nodes_per_switch}")
            for i in range(cluster.nodes)]


@dataclass
class World:
    scenario: Scenario
    nodes: list[Node]
    now: float = 0.0
    broken: dict[str, float] = field(default_factory=dict)  # node -> when it is repaired
    books: dict[str, JobProgress] = field(default_factory=dict)
    _queue: list = field(default_factory=list)
    _seq: itertools.count = field(default_factory=itertools.count)

    @classmethod
    def of(cls, scenario: Scenario) -> World:
        world = cls(scenario=scenario, nodes=cluster_nodes(scenario))
        gpus = scenario.cluster.gpus_per_node
        for model in scenario.jobs:
            world.books[model.id] = JobProgress.running(model, default_table(model, gpus), gpus, 0.0)
        return world

    def at(self, ts: float, action: Callable[..., None], *args: object) -> None:
        """Run `action(*args)` at `ts` (not before now); same-time actions run in the order scheduled."""
        heapq.heappush(self._queue, (max(ts, self.now), next(self._seq), action, args))

    def healthy(self, node: str) -> bool:
        return node not in self.broken

    def run_until(self, end: float, on_sample: Callable[[float], None], samples: list[float]) -> None:
        """Run the queue up to `end`, calling `on_sample(t)` at each of `samples` (sorted) as time passes."""
        pending = iter(samples)
        sample = next(pending, None)
        while self._queue and self._queue[0][0] <= end:
            ts, _, action, args = heapq.heappop(self._queue)
            while sample is not None and sample <= ts:
                self.now = sample
                on_sample(sample)
                sample = next(pending, None)
            self.now = ts
            action(*args)
        while sample is not None:
            self.now = sample
            on_sample(sample)
            sample = next(pending, None)
        self.now = end


class Policy:
    """What a policy answers: the jobs' start, a fault, a repair. Each schedules its own follow-ups on
    the world's queue. `name` is how reports call it."""

    name = ""

    def __init__(self, world: World) -> None:
        self.world = world

    def start(self) -> None:
        raise NotImplementedError

    def fault(self, fault: Fault) -> None:
        raise NotImplementedError

    def repaired(self, node: str) -> None:
        raise NotImplementedError


def inject(world: World, policy: Policy, faults: list[Fault]) -> None:
    """Queue the trace: each fault at its time, and the repair of each node it breaks."""
    for fault in faults:
        world.at(fault.ts, _fault, world, policy, fault)


def _fault(world: World, policy: Policy, fault: Fault) -> None:
    if not world.healthy(fault.node):
        return  # out for repair already: nothing there to fail
    if fault.breaks_node:
        world.broken[fault.node] = fault.ts + fault.repair_s
        world.at(fault.ts + fault.repair_s, _repair, world, policy, fault.node)
    policy.fault(fault)


def _repair(world: World, policy: Policy, node: str) -> None:
    del world.broken[node]
    policy.repaired(node)
