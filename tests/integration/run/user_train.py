"""A user's own training script, written as one adopts trainmedic (docs/adopting.md): a plain torch
DDP MLP on random data, with a few lines changed from a torchrun script: `init_from_env` instead of
`init_process_group`, `rt.restore` before the loop, `rt.maybe_checkpoint` and `rt.step_done` after
each step, `rt.close()` at the end.

`--fail-at-step K --fail-flag PATH` makes rank 0 raise once, at step K of the first generation (the
flag file says it already did), so that a test can check an exception is healed. `--in-process`
trains under `rt.run`: a rank whose peer failed keeps its process into the next generation; `--fsdp`
shards the model with FSDP2 instead of wrapping it in DDP.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402 -- after OMP_NUM_THREADS, which torch reads on import
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from trainmedic.runtime import Hook, init_from_env  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--step-s", type=float, default=0.1)
    parser.add_argument("--fail-at-step", type=int)
    parser.add_argument("--fail-flag", type=Path)
    parser.add_argument("--in-process", action="store_true",
                        help="train under rt.run: a rank whose peer failed lives on into the next generation")
    parser.add_argument("--fsdp", action="store_true", help="shard the model with FSDP2 instead of DDP")
    parser.add_argument("--show-env", default="", help="variables (comma-separated) each rank prints at its "
                        "start, NAME=VALUE or NAME unset")
    args = parser.parse_args()
    torch.set_num_threads(1)

    rt = init_from_env(hook=Hook.from_env(), snapshot_every=1)
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


def train(rt, args: argparse.Namespace) -> None:
    torch.manual_seed(0)  # the same initial weights in every run (a restore then replaces them)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    if args.fsdp:  # shard first, then the optimizer and the restore (docs/adopting.md)
        mesh = init_device_mesh("cpu", (rt.world_size,))
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    start = rt.restore(model, optimizer)
    ddp = model if args.fsdp else DistributedDataParallel(model)
    print(f"rank {rt.rank}/{rt.world_size} generation {rt.env.generation} starts at step {start} "
          f"in pid {os.getpid()}", flush=True)
    if args.show_env:
        shown = (f"{name}={os.environ[name]}" if name in os.environ else f"{name} unset"
                 for name in args.show_env.split(","))
        print(f"rank {rt.rank} generation {rt.env.generation} env: {' '.join(shown)}", flush=True)
    for step in range(start, args.steps):
        if (args.fail_at_step == step and rt.rank == 0 and rt.env.generation == 0
                and args.fail_flag is not None and not args.fail_flag.exists()):
            args.fail_flag.touch()
            raise RuntimeError(f"injected failure at step {step}")
        torch.manual_seed(step * 100 + rt.rank)
        x = torch.randn(32, 8)
        loss = torch.nn.functional.mse_loss(ddp(x), x.sum(dim=1, keepdim=True))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(args.step_s)  # stands for real work
        rt.maybe_checkpoint(step + 1, model, optimizer)  # the node-local snapshot a restart restores
        rt.step_done(step, args.step_s)
        print(f"step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
