"""What a freshly started HSDP rank pays before and in its first step, whatever restores it: the
demo's transformer (trainmedic.demo.gpt) on a (nodes, 2) mesh, gloo on CPU, one process per rank on
this machine. Per rank, the median over ranks of: building and sharding the model; a restore's
work other than reading and copying the saved values, done as trainmedic does it (`init_state`:
the optimizer's state built over stand-ins, no step; the values land in place, `load_restored`) or
as DCP's `get_state_dict` / `set_state_dict` do it (a step at lr 0 on the DTensors, then every
tensor copied onto itself), or not at all; then the first and second training steps. A fresh
process pays DTensor's sharding propagation once per operator and layout (cached per process and
device mesh) wherever it first meets one, so the column to compare is "restore + first step"
(docs/executor.md, "Where an HSDP restore's seconds go"). Side by side: the demo's optimizer
(AdamW, fused: one operator over every parameter) and AdamW as torch builds it by default on a
CPU (a loop of operators per parameter).

    python bench/hsdp_first_step.py [--nodes 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from trainmedic.local.cluster import free_port


def rank_times(rank: int, world: int, port: int, restore: str, fused: bool, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.device_mesh import init_device_mesh

    from trainmedic.demo import gpt
    from trainmedic.runtime import sharded

    mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("replicate", "shard"))
    times = {}
    began = time.monotonic()
    net = gpt.shard(gpt.model(), mesh)
    optimizer = gpt.optimizer(net) if fused else torch.optim.AdamW(net.parameters(), lr=gpt.LR)
    times["build"] = time.monotonic() - began
    dist.barrier()
    began = time.monotonic()
    if restore == "trainmedic":
        sharded.init_state(optimizer)
        sharded.load_restored(net, optimizer, sharded.flat_state(net, optimizer), {})
    elif restore == "DCP":
        model_sd, optim_sd = get_state_dict(net, optimizer, options=sharded.OPTIONS)
        set_state_dict(net, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd,
                       options=sharded.OPTIONS)
    times["restore"] = time.monotonic() - began
    for name in ("first step", "second step"):
        began = time.monotonic()
        gpt.loss(net, *gpt.share(0, rank, world)).backward()
        optimizer.step()
        optimizer.zero_grad()
        times[name] = time.monotonic() - began
    times["restore + first step"] = times["restore"] + times["first step"]
    out.put(times)
    dist.destroy_process_group()


def run(world: int, restore: str, fused: bool) -> dict[str, float]:
    context = mp.get_context("fork")
    out = context.Queue()
    port = free_port()
    procs = [context.Process(target=rank_times, args=(r, world, port, restore, fused, out))
             for r in range(world)]
    for proc in procs:
        proc.start()
    found = [out.get(timeout=300) for _ in procs]
    for proc in procs:
        proc.join(60)
    return {name: statistics.median(t[name] for t in found) for name in found[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=4, help="mesh rows of 2 ranks each (default 4: 8 ranks)")
    args = parser.parse_args()
    world = 2 * args.nodes
    print(f"HSDP, the demo's transformer, {world} ranks ({args.nodes} x 2), gloo on CPU, "
          f"{os.cpu_count()} cores; median over ranks, s")
    for fused in (True, False):
        for restore in ("trainmedic", "DCP", "none"):
            times = run(world, restore, fused)
            how = "none" if restore == "none" else f"as {restore}"
            label = f"{'fused' if fused else 'default'} AdamW, restore {how}"
            print(f"{label:38}  " + "  ".join(f"{name} {seconds:.3f}" for name, seconds in times.items()))


if __name__ == "__main__":
    main()
