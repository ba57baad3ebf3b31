"""A training script as a user writes it, for the recovery bench's user-style rows
(`bench/recovery_vs_torchrun.py --script user`): started as `python user_train.py ARGS`, plain
`torch.nn`, `torch.optim` and DistributedDataParallel, the loop under `rt.run` (docs/adopting.md).

What the bench needs of it besides: a `step N loss L gen G rank R t T` line per step (torchrun's
timeline, and the losses the bench compares with `reference_losses`, the same model trained
uninterrupted in one process) and the rank-fault file read before each step (`--fault-file`, the
bench's `raise`). The ranks share one batch per step, the same in every run.
"""

import argparse
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel

from trainmedic.runtime import Hook, init_from_env
from trainmedic.runtime.faults import FAULTS_ENV, due, inject, read_faults

BATCH, FEATURES = 48, 16


def build() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(BATCH, FEATURES, generator=torch.Generator().manual_seed(1000 + step))
    return x, x.sum(dim=1, keepdim=True)


def reference_losses(until: int) -> Iterator[float]:
    """The loss of every step from 0 to `until`, trained uninterrupted in this process."""
    model, optimizer = build()
    for step in range(until):
        x, y = batch(step)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y, reduction="sum") / BATCH
        loss.backward()
        optimizer.step()
        yield loss.item()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--step-s", type=float, default=0.25, help="pad each step to this long")
    parser.add_argument("--timeout-s", type=float, default=60.0)
    parser.add_argument("--checkpoint-every", type=int, default=0, help="0: node-local snapshots only")
    parser.add_argument("--fault-file", type=Path, default=os.environ.get(FAULTS_ENV) or None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    snapshots = 0 if args.checkpoint_every else 1
    rt = init_from_env(timeout_s=args.timeout_s, hook=Hook.from_env(), snapshot_every=snapshots,
                       checkpoint_every=args.checkpoint_every)

    def train(rt) -> None:
        model, optimizer = build()
        start = rt.restore(model, optimizer)
        ddp = DistributedDataParallel(model)
        rows = slice(rt.rank * BATCH // rt.world_size, (rt.rank + 1) * BATCH // rt.world_size)
        for step in range(start, args.steps):
            fault = due(read_faults(args.fault_file), rank=rt.rank, step=step, generation=rt.env.generation)
            if fault is not None:
                inject(fault, step=step)
            began = time.monotonic()
            x, y = batch(step)
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp(x[rows]), y[rows], reduction="sum") / BATCH
            loss.backward()  # DDP averages the ranks' gradients: times world size, the whole batch's
            for p in model.parameters():
                p.grad.mul_(rt.world_size)
            optimizer.step()
            total = loss.detach().clone()
            torch.distributed.all_reduce(total)
            with rt.finishing_step():
                time.sleep(max(0.0, args.step_s - (time.monotonic() - began)))
                rt.maybe_checkpoint(step + 1, model, optimizer)
                rt.step_done(step, time.monotonic() - began)
                print(f"step {step} loss {total.item():.6f} gen {rt.env.generation} rank {rt.rank} "
                      f"t {time.time():.3f}", flush=True)

    try:
        rt.run(train)
    except Exception as err:
        rt.report_error(err)
        raise
    finally:
        rt.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
