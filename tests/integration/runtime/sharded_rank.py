"""One rank of a small FSDP2 / HSDP job on gloo (CPU) for the sharded restore tests: it restores
through the runtime, trains to a step on deterministic data (the same global batch whatever the
world size), snapshots every step and writes what it saw to `<out>/rank<N>.json`."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from tests.unit.runtime.test_rank_state import Sampler
from trainmedic.runtime.env import WorkerEnv
from trainmedic.runtime.rank import Runtime
from trainmedic.schemas import RestoreSource

BATCH = 8  # rows per step, split over the ranks (every rank is data parallel)


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    # 10 and 5 rows cut over 2 or 4 ranks: uneven shards, one of them empty
    return torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.ReLU(), torch.nn.Linear(10, 5))


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 + step)
    return torch.randn(BATCH, 6, generator=gen), torch.randn(BATCH, 5, generator=gen)


def run(rank: int, spec: dict[str, Any]) -> None:
    """`spec`: port, nodes (one per rank), replicas (HSDP replica groups; 1: FSDP), root (node
    dirs below it), restore, until, generation, out, and optionally checkpoint_dir, every, resume, async
    (snapshots written behind the next step), resync_at: the step before which the model is
    spoilt (a step half applied) and `resync` called, and own: each rank draws noise for its rows
    from its own torch stream and takes its batches from a sampler, both of which only the rank's
    own restored state continues."""
    world = len(spec["nodes"])
    node = spec["nodes"][rank]
    logging.basicConfig(filename=Path(spec["out"]) / f"rank{rank}.log", level=logging.INFO)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{spec['port']}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=120))  # a hang fails the test
    replicas = spec["replicas"]
    mesh = (init_device_mesh("cpu", (replicas, world // replicas), mesh_dim_names=("replicate", "shard"))
            if replicas > 1 else init_device_mesh("cpu", (world,), mesh_dim_names=("shard",)))
    net = model()
    for layer in net:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(net, mesh=mesh)
    optimizer = torch.optim.AdamW(net.parameters(), lr=0.05)
    env = WorkerEnv(master_addr="127.0.0.1", master_port=spec["port"], rank=rank, world_size=world,
                    local_rank=spec["nodes"][:rank].count(node), local_world_size=spec["nodes"].count(node),
                    job="j", node=node, generation=spec["generation"],
                    restore=RestoreSource(kind=spec["restore"]), checkpoint_dir=spec.get("checkpoint_dir"),
                    snapshot_dir=str(Path(spec["root"]) / node), resume=spec.get("resume"))
    runtime = Runtime(env, snapshot_every=1, checkpoint_every=spec.get("every", 0),
                      snapshot_async=spec.get("async", False))
    sampler, own = Sampler(), spec.get("own", False)
    torch.manual_seed(100 + rank)  # each rank's own stream (what a restore onto this world takes back)
    start = runtime.restore(net, optimizer, data=sampler)
    losses = {}
    for step in range(start, spec["until"]):
        if step == spec.get("resync_at"):
            with torch.no_grad():
                for param in net.parameters():
                    param.add_(1.0)
            runtime.resync(net, optimizer)
        x, y = batch(sampler.next() if own else step)
        x = x[rank::world]
        if own:
            x = x + 0.1 * torch.randn_like(x)
        loss = torch.nn.functional.mse_loss(net(x), y[rank::world])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses[step + 1] = mean.item() / world
        runtime.maybe_checkpoint(step + 1, net, optimizer, data=sampler)
    source = runtime.restored_from
    (Path(spec["out"]) / f"rank{rank}.json").write_text(json.dumps({
        "start": start, "losses": losses, "kind": source.kind if source else None,
        "warning": runtime.restore_warning, "restored": runtime.restored, "own": runtime.own_state}))
    runtime.close()  # waits for a snapshot still being written
