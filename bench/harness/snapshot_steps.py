"""The snapshot benches' ranks (bench/hsdp_snapshot_overhead.py, bench/sharded_restore.py): a gloo
group on loopback in an HSDP mesh, and the order in which their steps take each snapshot mode."""

from __future__ import annotations

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

MODES = ("plain", "sync", "async")  # no snapshot; one every step, written in the step; written behind it
ROUNDS = 2


def hsdp_mesh(rank: int, world: int, local: int, port: int) -> DeviceMesh:
    """This rank joined to a gloo group of `world` ranks at 127.0.0.1:`port`, in a mesh that shards
    over a node's `local` ranks and replicates across nodes (a rank alone: a 1-D mesh)."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    if world == 1:
        return init_device_mesh("cpu", (1,), mesh_dim_names=("shard",))
    return init_device_mesh("cpu", (world // local, local), mesh_dim_names=("replicate", "shard"))


def schedule(warm_up: int, steps: int) -> list[str]:
    """Each step's mode: `warm_up` steps, then `steps` of each mode in turn, ROUNDS times over (a
    mode's steps spread over the run, as this machine's speed drifts)."""
    return ["warm-up"] * warm_up + [mode for _ in range(ROUNDS) for mode in MODES for _ in range(steps)]
