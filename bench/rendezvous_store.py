"""Joining a gloo process group through the job's own store (issue 42, D1/D2) beside torch's TCPStore
(what it replaced), side by side in one run.

Each round starts WORLD processes on this machine (`torch.multiprocessing`, spawned once and kept);
every process meets its round's store at a fresh port (rank 0 serves it), joins a gloo process group
through a PrefixStore over it, runs one all_reduce and leaves. The time is rank 0's, from before it
opens the store to after the all_reduce: what a generation's rendezvous costs a restart. The job
store adds a proof (an HMAC over two nonces, both ways) per connection and serves from a Python
thread; TCPStore is torch's C++ server, open to anyone. No broker needed.

    .venv/bin/python bench/rendezvous_store.py [--world 4] [--rounds 25]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from trainmedic.runtime.env import WorkerEnv
from trainmedic.runtime.rendezvous import generation_store
from trainmedic.schemas import RestoreSource

TIMEOUT = timedelta(seconds=60)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tcp_store(rank: int, world: int, port: int) -> dist.Store:
    return dist.TCPStore("127.0.0.1", port, world, rank == 0, TIMEOUT, wait_for_workers=False)


def job_store(rank: int, world: int, port: int, key: str) -> dist.Store:
    env = WorkerEnv(master_addr="127.0.0.1", master_port=port, rank=rank, world_size=world, local_rank=rank,
                    local_world_size=world, job="bench", node="n1", generation=0, restore=RestoreSource(),
                    rendezvous_key=key)
    return generation_store(env, TIMEOUT.total_seconds())


def rank_main(rank: int, world: int, rounds: list[tuple[str, int, str]], out: mp.Queue) -> None:
    torch.set_num_threads(1)
    for kind, port, key in rounds:
        began = time.perf_counter()
        store = tcp_store(rank, world, port) if kind == "tcp" else job_store(rank, world, port, key)
        dist.init_process_group("gloo", store=dist.PrefixStore("g0", store), rank=rank, world_size=world,
                                timeout=TIMEOUT)
        dist.all_reduce(torch.ones(1))
        took = time.perf_counter() - began
        dist.barrier()
        dist.destroy_process_group()
        if kind == "job":
            store.close()
        if rank == 0:
            out.put((kind, took))
        del store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args()
    rounds = [(kind, free_port(), os.urandom(32).hex())
              for _ in range(args.rounds) for kind in ("tcp", "job")]
    out = mp.get_context("spawn").Queue()
    mp.spawn(rank_main, args=(args.world, rounds, out), nprocs=args.world, join=True)
    times: dict[str, list[float]] = {"tcp": [], "job": []}
    for _ in rounds:
        kind, took = out.get(timeout=5)
        times[kind].append(took)
    print(f"rendezvous + gloo init + one all_reduce, {args.world} ranks on this machine, "
          f"{args.rounds} rounds each (the first of each dropped: imports and warm-up)")
    print(f"{'store':<34}{'median s':>10}{'p90 s':>10}{'max s':>10}")
    for kind, name in (("tcp", "torch TCPStore (open to anyone)"), ("job", "job store (proved both ways)")):
        kept = sorted(times[kind][1:])
        p90 = kept[int(0.9 * (len(kept) - 1))]
        print(f"{name:<34}{statistics.median(kept):>10.4f}{p90:>10.4f}{kept[-1]:>10.4f}")


if __name__ == "__main__":
    main()
