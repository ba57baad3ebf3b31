"""A rank meets its own generation's store: one that connects while the old generation's rank 0
still serves the port connects again once the new rank 0 has marked its store."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import torch.distributed as dist

from tests.helpers.ports import free_port
from trainmedic.recovery.worker.env import WorkerEnv
from trainmedic.recovery.worker.runtime import generation_store
from trainmedic.schemas import RestoreSource


def env(rank: int, generation: int, port: int) -> WorkerEnv:
    return WorkerEnv(master_addr="127.0.0.1", master_port=port, rank=rank, world_size=2, local_rank=rank,
                     local_world_size=2, job="j", node="n", generation=generation, restore=RestoreSource())


def test_a_rank_that_reaches_the_old_generations_store_finds_the_new_one():
    port = free_port()
    old = dist.TCPStore("127.0.0.1", port, 2, True, timedelta(seconds=30), wait_for_workers=False)
    old.set("trainmedic/generation/3", "1")  # generation 3's rank 0, still finishing its step
    joined: list = []
    client = threading.Thread(target=lambda: joined.append(generation_store(env(1, 4, port), 30.0)))
    client.start()  # generation 4's rank 1: a node that only starts ranks launches first
    time.sleep(1.0)
    del old  # the old rank 0 dies; the new one starts on the same port
    time.sleep(0.5)
    new = generation_store(env(0, 4, port), 30.0)
    client.join(30)
    assert joined, "rank 1 never met generation 4's store"
    joined[0].set("from rank 1", "hello")
    assert new.get("from rank 1") == b"hello"  # the same store, not the old one
