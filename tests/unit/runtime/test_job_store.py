"""A generation's rendezvous store: only a party that proves the generation's key reads or writes a
key, a rank never joins a server that cannot prove it (a squatter, the old generation's), and a rank
that comes before rank 0 listens finds it."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from datetime import timedelta
from pathlib import Path

import msgspec
import pytest
import torch.distributed as dist

from tests.helpers.ports import free_port
from trainmedic.common.errors import ConfigError
from trainmedic.runtime import store_server
from trainmedic.runtime.env import WorkerEnv
from trainmedic.runtime.job_store import JobStore
from trainmedic.runtime.rendezvous import generation_store
from trainmedic.runtime.store_server import StoreServer, listen
from trainmedic.runtime.store_wire import StoreRefused
from trainmedic.schemas import RestoreSource

KEY = "11" * 32


def env(rank: int, generation: int, port: int, key: str | None = KEY) -> WorkerEnv:
    return WorkerEnv(master_addr="127.0.0.1", master_port=port, rank=rank, world_size=2, local_rank=rank,
                     local_world_size=2, job="j", node="n", generation=generation, restore=RestoreSource(),
                     rendezvous_key=key)


def frame(value: object) -> bytes:
    body = msgspec.msgpack.encode(value)
    return struct.pack(">I", len(body)) + body


def test_ranks_with_the_key_share_keys_and_waits():
    port = free_port()
    rank0 = generation_store(env(0, 1, port), 10.0)
    rank1 = generation_store(env(1, 1, port), 10.0)
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(rank1.get("later")))
    waiter.start()
    time.sleep(0.2)
    rank0.set("later", b"v")  # a get parked for a key not set yet is answered when it is
    waiter.join(5)
    assert got == [b"v"]
    assert rank1.add("n", 2) == 2 and rank0.add("n", 3) == 5
    assert rank0.compare_set("c", "", "x") == b"x" and rank1.compare_set("c", "y", "z") == b"x"
    rank1.multi_set(["a", "b"], ["1", "2"])
    assert rank0.multi_get(["a", "b"]) == [b"1", b"2"] and rank0.check(["a", "b"])
    assert rank0.delete_key("a") and not rank0.check(["a"])
    with pytest.raises(dist.DistStoreError, match="Timed out"):
        rank1.wait(["never"], timedelta(seconds=0.3))
    rank1.set("after a timeout", "a new connection")  # the timed-out answer is never read as this one's
    assert rank0.get("after a timeout") == b"a new connection"
    rank1.close()
    rank0.close()


def test_a_stranger_reads_and_writes_nothing():
    port = free_port()
    rank0 = generation_store(env(0, 1, port), 10.0)
    rank0.set("secret", b"gloo address")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.recv(4096)  # the server's hello and nonce
        sock.sendall(frame(["get", "secret"]))  # no proof: a request in its place
        assert sock.recv(4096) == b"", "the server answered a connection that proved nothing"
    with pytest.raises(StoreRefused):  # a client with another key is refused, and refuses in turn
        JobStore("127.0.0.1", port, os.urandom(32), timedelta(seconds=2))
    # torch's own client (what an attacker would try first) gets nowhere either
    with pytest.raises(dist.DistError):
        stranger = dist.TCPStore("127.0.0.1", port, None, False, timedelta(seconds=2))
        stranger.set("secret", "forged")
    assert rank0.get("secret") == b"gloo address"
    assert rank0.num_keys() == 1
    rank0.close()


def test_many_strangers_do_not_keep_the_ranks_out(monkeypatch):
    monkeypatch.setattr(store_server, "MAX_STRANGERS", 4)
    port = free_port()
    rank0 = generation_store(env(0, 1, port), 10.0)
    strangers = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(10)]
    try:
        rank1 = generation_store(env(1, 1, port), 10.0)
        rank1.set("k", "v")
        assert rank0.get("k") == b"v"
    finally:
        for sock in strangers:
            sock.close()
    rank0.close()


def test_a_rank_never_joins_a_squatter():
    port = free_port()
    squatter = StoreServer(listen("127.0.0.1", port), os.urandom(32))  # listens first, without the key
    tcp_squatter_port = free_port()
    tcp_squatter = dist.TCPStore("127.0.0.1", tcp_squatter_port, 2, True, timedelta(seconds=5),
                                 wait_for_workers=False)
    try:
        with pytest.raises(dist.DistStoreError, match="proved"):
            generation_store(env(1, 1, port), 1.0)
        with pytest.raises(dist.DistStoreError, match="proved"):
            generation_store(env(1, 1, tcp_squatter_port), 1.0)
        assert tcp_squatter.num_keys() <= 1  # torch's own key only: rank 1 wrote nothing there
    finally:
        squatter.close()


def test_a_rank_that_reaches_the_old_generations_store_finds_the_new_one():
    port = free_port()
    old = StoreServer(listen("127.0.0.1", port), os.urandom(32))  # generation 3's rank 0, finishing
    joined: list = []
    client = threading.Thread(target=lambda: joined.append(generation_store(env(1, 4, port), 30.0)))
    client.start()  # generation 4's rank 1: a node that only starts ranks launches first
    time.sleep(1.0)
    old.close()  # the old rank 0 ends; the new one listens
    new = generation_store(env(0, 4, port), 30.0)
    client.join(30)
    assert joined, "rank 1 never met generation 4's store"
    joined[0].set("from rank 1", "hello")
    assert new.get("from rank 1") == b"hello"
    joined[0].close()
    new.close()


def test_rank_0_listens_on_the_jobs_address_only():
    port = free_port()
    rank0 = generation_store(env(0, 1, port), 10.0)
    listening = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    mine = [row[1] for row in listening if row[3] == "0A" and int(row[1].split(":")[1], 16) == port]
    assert mine == ["0100007F:" + f"{port:04X}"]  # 127.0.0.1, not 0.0.0.0
    rank0.close()


def test_a_contract_without_a_key_is_refused():
    with pytest.raises(ConfigError, match="TRAINMEDIC_RENDEZVOUS_KEY"):
        generation_store(env(1, 1, free_port(), key=None), 1.0)


def test_a_request_that_breaks_the_server_drops_only_its_connection():
    port = free_port()
    rank0 = generation_store(env(0, 1, port), 10.0)
    rank1 = generation_store(env(1, 1, port), 10.0)
    with pytest.raises(dist.DistStoreError):
        rank1._call("set", "k")  # a value missing: the server drops that connection only
    rank0.set("k", "v")
    assert rank1.get("k") == b"v"  # a new connection
    rank0.close()
    rank0.close()  # twice: nothing happens
