"""What a snapshot every step costs the demo transformer's step (the issue's target: at most 5 %).

The `gpt-hsdp` demo's job (trainmedic/demo/gpt.py) on `--nodes` x `--ranks-per-node` gloo ranks
on this machine, HSDP as the demo runs it, through the worker runtime as the demo calls it:
`--steps` steps with no snapshot, then with `Runtime.maybe_checkpoint` snapshotting every step
in the step, then written behind it (`snapshot_async`), the three modes in turn, twice over,
after three steps of warm-up. Printed: the median step of each mode (the slowest rank's, from a
barrier), and the snapshot's cost as a share of that step and of the demo's padded step
(`--step-s`, 0.25 s), as the demo runs it.

    .venv/bin/python bench/hsdp_snapshot_overhead.py [--nodes 4] [--ranks-per-node 2] [--steps 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from harness.snapshot_steps import MODES, ROUNDS, hsdp_mesh, schedule

from trainmedic.demo import gpt
from trainmedic.local.cluster import free_port
from trainmedic.runtime.env import WorkerEnv
from trainmedic.runtime.rank import Runtime
from trainmedic.schemas import RestoreSource


def _rank(rank: int, spec: dict[str, Any]) -> None:
    torch.set_num_threads(1)
    world, local = spec["world"], spec["local"]
    net = gpt.shard(gpt.model(), hsdp_mesh(rank, world, local, spec["port"]))
    optimizer = gpt.optimizer(net)
    env = WorkerEnv(master_addr="127.0.0.1", master_port=spec["port"], rank=rank, world_size=world,
                    local_rank=rank % local, local_world_size=local, job="bench",
                    node=f"node-{rank // local}",
                    generation=0, restore=RestoreSource(kind="none"),
                    snapshot_dir=str(Path(spec["root"]) / f"node-{rank // local}"))
    runtimes = {"plain": Runtime(env, snapshot_every=0), "sync": Runtime(env),
                "async": Runtime(env, snapshot_async=True)}
    modes = schedule(3, spec["steps"])
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for step, mode in enumerate(modes):
        rt = runtimes.get(mode, runtimes["plain"])
        dist.barrier()
        began = time.perf_counter()
        gpt.loss(net, *gpt.share(step, rank, world)).backward()
        optimizer.step()
        optimizer.zero_grad()
        rt.maybe_checkpoint(step + 1, net, optimizer)
        took = torch.tensor([time.perf_counter() - began])
        dist.all_reduce(took, op=dist.ReduceOp.MAX)  # the job moves at its slowest rank's pace
        if mode in times:
            times[mode].append(took.item())
        if step + 1 < len(modes) and modes[step + 1] != mode:
            rt.flush()  # not timed: a write in flight does not slow the next mode's steps
    runtimes["async"].close()
    if rank == 0:
        (Path(spec["root"]) / "times.json").write_text(json.dumps(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--ranks-per-node", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--step-s", type=float, default=0.25, help="the demo's padded step (default 0.25)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hsdp-snapshot-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        world = args.nodes * args.ranks_per_node
        spec = {"root": str(root), "world": world, "local": args.ranks_per_node, "steps": args.steps,
                "port": free_port()}
        mp.spawn(_rank, args=(spec,), nprocs=world, join=True)
        times = json.loads((root / "times.json").read_text())
        plain, sync, behind = (statistics.median(times[mode]) for mode in MODES)
        params = sum(p.numel() for p in gpt.model().parameters())
        print(f"the gpt-hsdp demo's transformer ({params:,} parameters), HSDP {args.nodes} nodes x "
              f"{args.ranks_per_node} ranks, gloo on this machine; median step of the slowest rank over "
              f"{ROUNDS * args.steps} steps per mode")
        print(f"no snapshot {plain * 1e3:6.1f} ms | a snapshot every step, written in the step "
              f"{sync * 1e3:6.1f} ms | written behind it {behind * 1e3:6.1f} ms")
        for label, step in (("of the unpadded step", plain),
                            (f"of the demo's {args.step_s:g} s step", args.step_s)):
            print(f"snapshot cost {label:24}: in the step {100 * (sync - plain) / step:+5.1f} % | "
                  f"behind it {100 * (behind - plain) / step:+5.1f} %")


if __name__ == "__main__":
    main()
