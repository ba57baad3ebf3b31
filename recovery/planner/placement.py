"""Which nodes each job gets, once its size is fixed: its healthy current nodes first, then the nearest
by hops to its home switch (docs/planner.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from trainmedic.recovery.planner.topology import Switch, Topology, switch_hops
from trainmedic.schemas.plan import PlanRequest


def home_switch(nodes: Iterable[str], topology: Topology) -> Switch | None:
    """The switch that holds most of these nodes (the smaller switch on a tie); None if none."""
    counts = Counter(topology.switch_of(node) for node in nodes)
    return min(counts, key=lambda switch: (-counts[switch], switch), default=None)


def by_nearness(nodes: Iterable[str], home: Switch, topology: Topology) -> list[str]:
    """Nodes ordered by hops from the home switch, then switch, then id."""
    on: dict[Switch, list[str]] = {}
    for node in nodes:
        on.setdefault(topology.switch_of(node), []).append(node)
    nearest_first = sorted(on, key=lambda switch: (switch_hops(home, switch), switch))
    return [node for switch in nearest_first for node in sorted(on[switch])]


def place(
    request: PlanRequest, sizes: Mapping[str, int], topology: Topology
) -> dict[str, tuple[str, ...]]:
    """Job id -> its nodes: kept nodes in their current order, then the new ones.

    No node serves two jobs and unhealthy nodes serve none. A job that keeps no node
    centres on the switch where its current nodes were, else on the one with most free nodes.
    """
    healthy = [node.id for node in request.nodes if node.healthy]
    if sum(sizes.values()) > len(healthy):
        raise ValueError(f"sizes ask for {sum(sizes.values())} nodes, {len(healthy)} are healthy")
    up = set(healthy)
    survived: dict[str, list[str]] = {}
    kept: dict[str, list[str]] = {}
    # A job's home switch is found only where it is used (a job that shrinks, or one that takes
    # extra nodes): on a large cluster most jobs keep their nodes as they are.
    for job in request.jobs:
        survivors = survived[job.id] = [node for node in job.current if node in up]
        if len(survivors) <= sizes[job.id]:  # the job keeps every survivor: no need to rank them
            kept[job.id] = survivors
        else:
            keep = set(by_nearness(survivors, home_switch(survivors, topology), topology)[: sizes[job.id]])
            kept[job.id] = [node for node in job.current if node in keep]

    taken = {node for nodes in kept.values() for node in nodes}
    free: dict[Switch, list[str]] = {}
    for node in sorted(up - taken):
        free.setdefault(topology.switch_of(node), []).append(node)

    allocations = {}
    reserved = pooled_nodes(request)
    # Jobs with a pool first: they can go nowhere else. A job without one takes no node of a pool.
    # Where pools overlap, or the sizes ask more of the free nodes than the pools leave, a job may
    # get fewer nodes than its size (`plan` then gives it the largest size those nodes allow).
    for job in sorted(request.jobs, key=lambda job: job.pool is None):
        need = sizes[job.id] - len(kept[job.id])
        extra: list[str] = []
        if need > 0:
            home = (home_switch(survived[job.id] or job.current, topology)
                    or min(free, key=lambda switch: (-len(free[switch]), switch)))
            usable = may_use(job.pool, reserved)
            for switch in sorted(free, key=lambda s: (switch_hops(home, s), s)):
                if usable is None:
                    take = free[switch][: need - len(extra)]
                    del free[switch][: len(take)]
                else:
                    take = [node for node in free[switch] if usable(node)][: need - len(extra)]
                    if take:
                        gone = set(take)
                        free[switch] = [node for node in free[switch] if node not in gone]
                extra += take
                if len(extra) == need:
                    break
            free = {switch: nodes for switch, nodes in free.items() if nodes}
        allocations[job.id] = (*kept[job.id], *extra)
    return {job.id: allocations[job.id] for job in request.jobs}


def pooled_nodes(request: PlanRequest) -> frozenset[str]:
    """Every node in some job's pool: a job without a pool takes none of them."""
    return frozenset(node for job in request.jobs if job.pool is not None for node in job.pool)


def may_use(pool: tuple[str, ...] | None, reserved: frozenset[str]) -> Callable[[str], bool] | None:
    """Which free nodes a job may take: its pool's, else those of no pool (None: any)."""
    if pool is not None:
        return frozenset(pool).__contains__
    if reserved:
        return lambda node: node not in reserved
    return None
