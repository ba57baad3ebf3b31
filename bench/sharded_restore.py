"""Sharded restore: from the surviving replica's snapshots vs from the DCP checkpoint, side by side,
and what a snapshot every step costs the step.

An HSDP job of 2 nodes x 2 ranks (gloo, CPU; shard within a node, replicate across) trains an
MLP of `--width`-square layers with AdamW, snapshotting every step and checkpointing (DCP) at
the last. Node b is then lost and the job restarts on nodes a and c, `--runs` times each way,
alternating: restoring from the snapshots (node a reads its own shards, node c's ranks receive
theirs from a) and from the checkpoint on the same disk. Printed, as medians over the runs: each
restore's wall time (the slowest rank's `ShardRestore.seconds`, from a barrier) and the part of
it that moves the state (after the slowest rank's `prepare_s`, the template both ways build
alike: gathering offers, planning, reading, sending and loading for the snapshots; DCP's load
for the checkpoint); and the median step time with no snapshot, with one every step written
in the step, and with one every step written behind it (`SnapshotWriter`), `--steps` steps of
each mode in turn, twice over, after two steps of warm-up (the last step's snapshot is the one
restored): for the HSDP job, whose four ranks share this machine's two cores (a write
behind the step takes CPU from the other ranks), and for the same model on one rank alone,
which leaves the writer a core, as a GPU node's host has. The step times vary by several per
cent from run to run.
Run: .venv/bin/python bench/sharded_restore.py [--width 1024] [--layers 4] [--steps 5] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from harness.snapshot_steps import MODES, hsdp_mesh, schedule
from torch.distributed.fsdp import fully_shard

from trainmedic.local.cluster import free_port
from trainmedic.runtime import sharded
from trainmedic.runtime.env import WorkerEnv
from trainmedic.runtime.snapshot_writer import SnapshotWriter
from trainmedic.schemas import RestoreSource

NODES = {"before": ["a", "a", "b", "b"], "after": ["a", "a", "c", "c"]}


def _job(rank: int, nodes: list[str], spec: dict[str, Any]) -> tuple[torch.nn.Module, Any, WorkerEnv]:
    torch.set_num_threads(1)  # one core per rank's compute: the lone rank leaves the writer the other
    mesh = hsdp_mesh(rank, len(nodes), 2, spec["port"])
    torch.manual_seed(0)
    net = torch.nn.Sequential(*(torch.nn.Linear(spec["width"], spec["width"]) for _ in range(spec["layers"])))
    for layer in net:
        fully_shard(layer, mesh=mesh)
    fully_shard(net, mesh=mesh)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    env = WorkerEnv(master_addr="127.0.0.1", master_port=spec["port"], rank=rank, world_size=len(nodes),
                    local_rank=rank % 2, local_world_size=2, job="bench", node=nodes[rank],
                    generation=spec["generation"], restore=RestoreSource(kind=spec["restore"]),
                    checkpoint_dir=str(Path(spec["root"]) / "shared"),
                    snapshot_dir=str(Path(spec["root"]) / snapshots(spec) / nodes[rank]))
    return net, optimizer, env


def snapshots(spec: dict[str, Any]) -> str:
    """Where the ranks keep snapshots: a restore takes the newest state, and the snapshots are as new as
    the checkpoint, so the checkpoint's runs see none (an empty folder) to restore from the checkpoint."""
    return "no-snapshots" if spec["restore"] == "checkpoint" else "."


def _train(rank: int, spec: dict[str, Any]) -> None:
    net, optimizer, env = _job(rank, spec["nodes"], spec)
    x = torch.randn(16, spec["width"], generator=torch.Generator().manual_seed(rank))
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    writer, step = SnapshotWriter(), 0
    modes = schedule(2, spec["steps"])
    for step, mode in enumerate(modes, start=1):
        began = time.perf_counter()
        net(x).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        dist.barrier()
        if mode in ("sync", "async"):
            sharded.snapshot(Path(env.snapshot_dir), rank, step, 0, sharded.flat_state(net, optimizer),
                             writer if mode == "async" else None)
        if mode in times:
            times[mode].append(time.perf_counter() - began)
        if mode != modes[min(step, len(modes) - 1)]:
            writer.wait()  # not timed: a write in flight does not slow the next mode's steps
    writer.wait()
    sharded.checkpoint(Path(env.checkpoint_dir), step, 0, sharded.flat_state(net, optimizer))
    if rank == 0:
        (Path(spec["root"]) / "train.json").write_text(json.dumps({"times": times, "step": step}))
    dist.destroy_process_group()


def _restore(rank: int, spec: dict[str, Any]) -> None:
    net, optimizer, env = _job(rank, NODES["after"], spec)
    dist.barrier()  # every rank starts the restore together
    done = sharded.restore(env, net, optimizer)
    assert done is not None and done.kind == spec["restore"], done
    # the slowest rank's end, and the slowest rank's template (no rank moves state before it)
    seconds = torch.tensor([done.seconds, done.prepare_s])
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    if rank == 0:
        (Path(spec["root"]) / f"{spec['restore']}-{spec['generation']}.json").write_text(json.dumps(
            {"seconds": seconds[0].item(), "moving": (seconds[0] - seconds[1]).item(), "step": done.step}))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sharded-restore-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        spec = {"root": str(root), "width": args.width, "layers": args.layers, "steps": args.steps,
                "generation": 0, "restore": "none"}
        params = args.layers * (args.width + 1) * args.width
        print(f"HSDP 2 nodes x 2 ranks, {params / 1e6:.1f} M parameters ({params * 12 / 2**20:.0f} MiB with "
              f"AdamW's state, {params * 12 / 2 / 2**20:.0f} MiB per rank)")
        for label, nodes, at in (("1 rank alone (a spare core)", ["a"], root / "alone"),
                                 ("HSDP 2 x 2 ranks", NODES["before"], root)):
            mp.spawn(_train, args=({**spec, "root": str(at), "nodes": nodes, "port": free_port()},),
                     nprocs=len(nodes), join=True)
            trained = json.loads((at / "train.json").read_text())
            plain, sync, behind = (statistics.median(trained["times"][mode]) for mode in MODES)
            print(f"median step, {label:27}: no snapshot {plain * 1e3:6.1f} ms | a snapshot every step, "
                  f"written in the step {sync * 1e3:6.1f} ms ({100 * (sync - plain) / plain:+5.1f} %) | "
                  f"written behind it {behind * 1e3:6.1f} ms ({100 * (behind - plain) / plain:+5.1f} %)")
        shutil.rmtree(root / "b")  # node b lost, with its disk
        runs = [(generation, kind) for generation in range(1, args.runs + 1)
                for kind in ("replica", "checkpoint")]
        for generation, kind in runs:
            run = {**spec, "port": free_port(), "generation": generation, "restore": kind}
            mp.spawn(_restore, args=(run,), nprocs=4, join=True)
        got = {kind: [json.loads((root / f"{kind}-{g}.json").read_text()) for g, k in runs if k == kind]
               for kind in ("replica", "checkpoint")}
        assert {r["step"] for rs in got.values() for r in rs} == {trained["step"]}
        for part, what in (("seconds", "whole restore"), ("moving", "moving the state")):
            replica, checkpoint = (statistics.median(r[part] for r in got[kind]) for kind in got)
            print(f"{what:16}: from the replica's snapshots {replica:6.3f} s | from the DCP checkpoint "
                  f"{checkpoint:6.3f} s | checkpoint / replica {checkpoint / replica:4.2f}x")


if __name__ == "__main__":
    main()
