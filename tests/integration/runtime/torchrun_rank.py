"""A script started by torchrun, with no executor: it joins with `init_from_env` and all-reduces its
rank, so that each rank prints the sum of every rank."""

import torch
import torch.distributed as dist

from trainmedic.runtime import init_from_env

runtime = init_from_env(timeout_s=60)
total = torch.tensor([float(runtime.rank)])
dist.all_reduce(total)
print(f"rank {runtime.rank}: sum {total.item():g}", flush=True)
runtime.close()
