"""Where each node that joins a job takes the job's state from: the nearest surviving node of the job
(a replica), else the latest checkpoint (docs/planner.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from trainmedic.recovery.planner.topology import Switch, Topology, switch_hops
from trainmedic.schemas.commands import RestoreSource
from trainmedic.schemas.plan import PlanRequest

CHECKPOINT = RestoreSource(kind="checkpoint")


def restore_sources(
    request: PlanRequest, allocations: Mapping[str, tuple[str, ...]], topology: Topology
) -> dict[str, RestoreSource]:
    """Node id -> its restore source, for every node that is not already in its job."""
    sources = {}
    for job in request.jobs:
        current = set(job.current)
        newcomers = [node for node in allocations[job.id] if node not in current]
        if not newcomers:
            continue
        # Survivors are the current nodes the plan keeps: placement keeps only healthy ones.
        nearest_in: dict[Switch, str] = {}  # switch -> its smallest surviving node id
        for node in allocations[job.id]:
            if node in current:
                switch = topology.switch_of(node)
                nearest_in[switch] = min(node, nearest_in.get(switch, node))
        replica_for: dict[Switch, str] = {}  # every newcomer on a switch gets the same one
        for node in newcomers:
            if not nearest_in:
                sources[node] = CHECKPOINT
                continue
            switch = topology.switch_of(node)
            if switch not in replica_for:
                replica_for[switch] = min(nearest_in.items(),
                                          key=lambda s: (switch_hops(switch, s[0]), s[1]))[1]
            sources[node] = RestoreSource(kind="replica", node=replica_for[switch])
    return sources
