"""How a rank finds its generation's store: rank 0 serves it (job_store.py), every rank connects
until a server proves the generation's key. A script started by torchrun, with no executor and so no
key, meets as torchrun's ranks always do."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import timedelta

import torch.distributed as dist

from trainmedic.common.errors import ConfigError
from trainmedic.runtime.env import RENDEZVOUS_KEY, WorkerEnv, loopback_rendezvous
from trainmedic.runtime.job_store import JobStore
from trainmedic.runtime.store_server import StoreServer, listen
from trainmedic.runtime.store_wire import StoreRefused

log = logging.getLogger(__name__)

TORCHRUN = "TORCHELASTIC_RUN_ID"  # in the environment of every rank torchrun starts

CONNECT_AGAIN_S = 0.02  # how soon a rank tries its generation's store again (rank 0 may not listen yet)


def generation_store(contract: WorkerEnv, timeout_s: float) -> JobStore:
    """The rendezvous store of this rank's own generation (job_store.py), which rank 0 serves on the
    job's address at the generation's port.

    The nodes of a re-plan do not start at the same moment: a rank may come before rank 0 listens.
    So every rank connects again, for `timeout_s` at most, until a server proves the generation's
    key; one that cannot (a stranger's, another generation's) is never used. A MASTER_ADDR that is
    loopback here in a job that spans nodes is a ConfigError at once (`loopback_rendezvous`).
    """
    if not contract.rendezvous_key:
        raise ConfigError(f"{RENDEZVOUS_KEY} is not set: is this rank launched by `trainmedic executor`?")
    unreachable = loopback_rendezvous(contract)
    if unreachable:
        raise ConfigError(unreachable)
    key = bytes.fromhex(contract.rendezvous_key)
    addr, port = contract.master_addr, contract.master_port
    server = None
    if contract.rank == 0:
        try:
            server = StoreServer(listen(addr, port), key)
        except OSError as err:
            raise RuntimeError(f"rank 0 of job {contract.job} g{contract.generation} cannot listen at "
                               f"{addr}:{port} for its rendezvous ({err.strerror or err}); the next "
                               "generation gets another port") from None
    deadline = time.monotonic() + timeout_s
    said = False
    while True:
        try:
            return JobStore(addr, port, key, timedelta(seconds=timeout_s), server)
        except (StoreRefused, OSError) as err:
            if time.monotonic() >= deadline:
                if server is not None:
                    server.close()
                raise dist.DistStoreError(f"rank {contract.rank} g{contract.generation}: no store at "
                                          f"{addr}:{port} proved this generation's key in {timeout_s:g}s "
                                          f"({err})") from None
            if not said:
                log.info("rank %d g%d: no store of this generation at %s:%d yet (%s); connecting again",
                         contract.rank, contract.generation, addr, port, str(err).splitlines()[0][:120])
                said = True
            time.sleep(CONNECT_AGAIN_S)


def join_store(contract: WorkerEnv, timeout_s: float, env: Mapping[str, str]) -> dist.Store:
    """The store this rank joins its process group through: its generation's, which only holders of
    the generation's key can join; or, under torchrun with no key (no executor launched it), torch's
    own TCPStore at MASTER_ADDR:MASTER_PORT, served by torchrun's agent (else by rank 0), which anyone
    who reaches the port can join, as with any torchrun job (docs/security.md)."""
    if contract.rendezvous_key or TORCHRUN not in env:
        return generation_store(contract, timeout_s)
    log.warning("rank %d: started by torchrun with no %s: joining through torch's own store at %s:%d, "
                "which anyone who reaches that port can join", contract.rank, RENDEZVOUS_KEY,
                contract.master_addr, contract.master_port)
    master = contract.rank == 0 and env.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
    return dist.TCPStore(contract.master_addr, contract.master_port, contract.world_size if master else None,
                         master, timedelta(seconds=timeout_s), wait_for_workers=False)
