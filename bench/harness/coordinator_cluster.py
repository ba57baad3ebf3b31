"""The coordinator benches' synthetic cluster: nodes n00000, n00001, … on leaf switches of a fixed
size, and jobs of 8 ranks per node on consecutive nodes with a concave scaling curve."""

from __future__ import annotations

from collections.abc import Iterable

from trainmedic.recovery.coordinator.core import ClusterState, CoordinatorConfig, NodeConfig
from trainmedic.schemas import JobSpec

RANKS_PER_NODE = 8


def node_names(count: int) -> list[str]:
    return [f"n{i:05d}" for i in range(count)]


def initial_state(names: list[str], leaf: int) -> ClusterState:
    """An idle cluster of `names`, `leaf` nodes to a leaf switch (leaf-0000, leaf-0001, …)."""
    return ClusterState.initial(CoordinatorConfig(nodes=tuple(
        NodeConfig(id=n, switch=f"leaf-{i // leaf:04d}") for i, n in enumerate(names))))


def throughput(sizes: Iterable[int]) -> dict[int, float]:
    """A job's throughput table at these node counts, on one concave curve."""
    return {s: 1e15 * s ** 0.9 for s in sizes}


def job_spec(index: int, nodes: list[str], sizes: Iterable[int]) -> JobSpec:
    """Job `job-NN` on `nodes`, its throughput known at `sizes`."""
    return JobSpec(id=f"job-{index:02d}", nodes=tuple(nodes), ranks_per_node=RANKS_PER_NODE,
                   throughput=throughput(sizes), command=("python", "train.py"), checkpoint_dir="/ckpt")
