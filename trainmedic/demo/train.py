"""The demo's training job, which uses the worker runtime; launched by the executor. Prints one line
per step (`step 41 loss 0.123456 gen 0 rank 1 t 1712345678.123`); faults come from a control file
(docs/executor.md, "The demo job and fault injection").

    python -m trainmedic.demo.train --steps 200 --step-s 0.1 [--model gpt-hsdp]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402 -- after OMP_NUM_THREADS, which torch reads on import

from trainmedic.demo import MODELS  # noqa: E402
from trainmedic.runtime.faults import FAULTS_ENV, due, inject, read_faults  # noqa: E402
from trainmedic.runtime.hook import Hook  # noqa: E402
from trainmedic.runtime.rank import Runtime, Stateful, init_from_env  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000, help="train until this many steps (default 1000)")
    parser.add_argument("--step-s", type=float, default=0.1, help="pad each step to this long (default 0.1)")
    parser.add_argument("--model", choices=MODELS, default="mlp",
                        help="mlp: data parallel (default); gpt-hsdp: a small transformer, HSDP over nodes; "
                        "gpt-fsdp: the same transformer, FSDP2 over every rank")
    parser.add_argument("--hidden", type=int, default=32, help="hidden width of the MLP (default 32)")
    parser.add_argument("--snapshot-every", type=int, default=1, help="node-local snapshot period, steps")
    parser.add_argument("--checkpoint-every", type=int, default=0,
                        help="checkpoint period in steps, into TRAINMEDIC_CHECKPOINT_DIR (0: never)")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="rendezvous and collective timeout")
    parser.add_argument("--in-process", action="store_true",
                        help="train under rt.run: when a peer fails, this rank keeps its process into the "
                        "next generation (docs/executor.md, \"Survivors keep their processes\")")
    parser.add_argument("--report", action="store_true",
                        help="report worker_start/step/error to telemetry.worker through the in-band hook")
    parser.add_argument("--fault-file", type=Path, default=os.environ.get(FAULTS_ENV) or None,
                        help=f"fault control file (env {FAULTS_ENV})")
    return parser.parse_args(argv)


class Job(NamedTuple):
    """What the loop trains: the model and optimizer the runtime saves, and one step (-> its loss)."""

    model: torch.nn.Module
    optimizer: Stateful
    step: Callable[[int], float]


def mlp_job(rt: Runtime, hidden: int) -> Job:
    """Data parallel: every rank holds the whole model and trains on its share of the step's batch."""
    from trainmedic.demo import mlp

    model = mlp.model(hidden)
    optimizer = mlp.Momentum(list(model.parameters()))

    def step(n: int) -> float:
        optimizer.zero_grad()
        loss = mlp.summed_loss(model, *mlp.share(n, rt.rank, rt.world_size))
        loss.backward()
        grads = [p.grad for p in model.parameters()]
        flat = torch.cat([g.reshape(-1) for g in grads])
        torch.distributed.all_reduce(flat)  # the sums of every share: the whole batch's
        flat /= mlp.BATCH
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()
        optimizer.step()
        total = loss.detach().clone()
        torch.distributed.all_reduce(total)
        return total.item() / mlp.BATCH

    return Job(model, optimizer, step)


def gpt_job(rt: Runtime, replicate_over_nodes: bool) -> Job:
    """FSDP2 over every rank (a 1-D mesh), or HSDP: the mesh is (nodes, ranks per node), shard within a
    node, replicate across nodes."""
    from torch.distributed.device_mesh import init_device_mesh

    from trainmedic.demo import gpt

    local = rt.env.local_world_size
    device = rt.device or torch.device("cpu")
    if replicate_over_nodes:
        mesh = init_device_mesh(device.type, (rt.world_size // local, local),
                                mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh(device.type, (rt.world_size,), mesh_dim_names=("shard",))
    model = gpt.shard(gpt.model().to(device), mesh)
    optimizer = gpt.optimizer(model)

    def step(n: int) -> float:
        inputs, targets = gpt.share(n, rt.rank, rt.world_size)
        loss = gpt.loss(model, inputs.to(device), targets.to(device))
        loss.backward()  # FSDP averages the gradients over every rank
        optimizer.step()
        optimizer.zero_grad()
        total = loss.detach().clone()
        torch.distributed.all_reduce(total)
        return total.item() / rt.world_size

    return Job(model, optimizer, step)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(1)
    rt = init_from_env(timeout_s=args.timeout_s, snapshot_every=args.snapshot_every,
                       checkpoint_every=args.checkpoint_every, hook=Hook.from_env() if args.report else None)
    try:
        if args.in_process:
            rt.run(lambda rt: train(rt, args))
        else:
            train(rt, args)
    except Exception as err:
        rt.report_error(err)
        raise
    finally:
        rt.close()
    return 0


def train(rt: Runtime, args: argparse.Namespace) -> None:
    """Build the job, restore it and train to `args.steps`, injecting the fault file's faults."""
    job = gpt_job(rt, args.model == "gpt-hsdp") if args.model.startswith("gpt") else mlp_job(rt, args.hidden)
    model, optimizer = job.model, job.optimizer
    start = rt.restore(model, optimizer)
    source = rt.restored_from
    print(f"restored step {start} from {'nothing' if source is None else source.kind} "
          f"gen {rt.env.generation} rank {rt.rank} t {time.time():.3f}", flush=True)
    step = start
    while step < args.steps:
        fault = due(read_faults(args.fault_file), rank=rt.rank, step=step, generation=rt.env.generation)
        if fault is not None:
            inject(fault, step=step)
        if rt.agree_reattempt():
            rt.resync(model, optimizer)
            print(f"reattempt: re-synced from rank 0, re-running step {step}", flush=True)
        began = time.monotonic()
        loss = job.step(step)
        with rt.finishing_step():  # a stop now waits for the snapshot: no rank runs a step others lose
            time.sleep(max(0.0, args.step_s - (time.monotonic() - began)))
            rt.maybe_checkpoint(step + 1, model, optimizer)
            rt.step_done(step, time.monotonic() - began)
            print(f"step {step} loss {loss:.6f} gen {rt.env.generation} rank {rt.rank} "
                  f"t {time.time():.3f}", flush=True)
        step += 1


if __name__ == "__main__":
    sys.exit(main())
