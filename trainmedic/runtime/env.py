"""The environment contract between the executor (which writes it) and a rank (which reads it). Pure:
no torch import, so the executor can use it too (docs/executor.md, "The environment of a rank").
"""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pydantic import ValidationError

from trainmedic.common.errors import ConfigError
from trainmedic.common.timespan import env_seconds
from trainmedic.schemas import RestoreSource

COLLECTIVE_TIMEOUT = "TRAINMEDIC_COLLECTIVE_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 60.0  # rendezvous and collectives, when neither the caller nor the job says
HANG_FLOOR = "TRAINMEDIC_HANG_FLOOR_S"
SUBMISSION = "TRAINMEDIC_SUBMISSION"
RESUME = "TRAINMEDIC_RESUME"
RENDEZVOUS_KEY = "TRAINMEDIC_RENDEZVOUS_KEY"
NODE_ADDRESS = "TRAINMEDIC_NODE_ADDRESS"


@dataclass(frozen=True, slots=True)
class WorkerEnv:
    """Everything a rank learns from its environment."""

    master_addr: str
    master_port: int
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    job: str
    node: str
    generation: int
    restore: RestoreSource
    checkpoint_dir: str | None = None  # this submission's own (the job's checkpoint_dir/JOB/SUBMISSION)
    snapshot_dir: str | None = None
    collective_timeout_s: float | None = None
    hang_floor_s: float | None = None
    submission: str | None = None  # which submission of the job this rank is of
    resume: str | None = None  # the checkpoint the submission started from (the job spec's `resume`)
    rendezvous_key: str | None = None  # the generation's secret, hex (job_store.py)
    node_address: str | None = None  # this node's data-plane address, when its executor was given one

    def to_env(self) -> dict[str, str]:
        """The variables the executor sets for this rank (absent optional dirs are left unset)."""
        env = {
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "TRAINMEDIC_JOB": self.job,
            "TRAINMEDIC_NODE": self.node,
            "TRAINMEDIC_GENERATION": str(self.generation),
            "TRAINMEDIC_RESTORE": self.restore.model_dump_json(),
        }
        if self.checkpoint_dir:
            env["TRAINMEDIC_CHECKPOINT_DIR"] = self.checkpoint_dir
        if self.snapshot_dir:
            env["TRAINMEDIC_SNAPSHOT_DIR"] = self.snapshot_dir
        if self.collective_timeout_s is not None:
            env[COLLECTIVE_TIMEOUT] = repr(self.collective_timeout_s)
        if self.hang_floor_s is not None:
            env[HANG_FLOOR] = repr(self.hang_floor_s)
        if self.submission:
            env[SUBMISSION] = self.submission
        if self.resume:
            env[RESUME] = self.resume
        if self.rendezvous_key:
            env[RENDEZVOUS_KEY] = self.rendezvous_key
        if self.node_address:
            env[NODE_ADDRESS] = self.node_address
        return env

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WorkerEnv:
        """Parse the contract; raises ConfigError naming the variable that is missing or wrong."""

        def need(name: str) -> str:
            value = env.get(name)
            if not value:
                raise ConfigError(f"{name} is not set: is this rank launched by `trainmedic executor`?")
            return value

        def number(name: str, default: str | None = None) -> int:
            raw = env.get(name, default) if default is not None else need(name)
            try:
                return int(raw)
            except ValueError:
                raise ConfigError(f"{name}={raw!r} is not an integer") from None

        try:
            restore = RestoreSource.model_validate(json.loads(env.get("TRAINMEDIC_RESTORE") or "{}"))
        except (ValueError, ValidationError) as err:
            raise ConfigError(f"TRAINMEDIC_RESTORE is not a restore source: {err}") from None
        return cls(
            master_addr=need("MASTER_ADDR"),
            master_port=number("MASTER_PORT"),
            rank=number("RANK"),
            world_size=number("WORLD_SIZE"),
            local_rank=number("LOCAL_RANK", "0"),
            local_world_size=number("LOCAL_WORLD_SIZE", "1"),
            job=env.get("TRAINMEDIC_JOB", "job"),
            node=env.get("TRAINMEDIC_NODE", "localhost"),
            generation=number("TRAINMEDIC_GENERATION", env.get("TORCHELASTIC_RESTART_COUNT", "0")),
            restore=restore,
            checkpoint_dir=env.get("TRAINMEDIC_CHECKPOINT_DIR") or None,
            snapshot_dir=env.get("TRAINMEDIC_SNAPSHOT_DIR") or None,
            collective_timeout_s=env_seconds(env, COLLECTIVE_TIMEOUT),
            hang_floor_s=env_seconds(env, HANG_FLOOR),
            submission=env.get(SUBMISSION) or None,
            resume=env.get(RESUME) or None,
            rendezvous_key=env.get(RENDEZVOUS_KEY) or None,
            node_address=env.get(NODE_ADDRESS) or None,
        )


def _resolved(host: str) -> list[str]:
    try:
        return [info[4][0] for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)]
    except (OSError, UnicodeError):  # unresolvable here: the rendezvous says so itself
        return []


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def loopback_rendezvous(contract: WorkerEnv, resolve: Callable[[str], list[str]] = _resolved) -> str | None:
    """Why this rank cannot meet its job's other nodes, or None. A job that spans nodes (WORLD_SIZE above
    LOCAL_WORLD_SIZE) on a node with a data address that is not loopback, whose MASTER_ADDR resolves
    (`resolve`, first address: where rank 0 listens) to loopback, would wait out its timeout and read
    as a job that never completed a step. A node without a data address (all on one machine) passes."""
    if not contract.node_address or _loopback(contract.node_address):
        return None
    if contract.world_size <= contract.local_world_size:
        return None
    found = resolve(contract.master_addr)
    if not found or not _loopback(found[0]):
        return None
    return (f"rank {contract.rank} of job {contract.job}: its rendezvous address MASTER_ADDR="
            f"{contract.master_addr} is {found[0]} (loopback) on node {contract.node}, whose data address "
            f"is {contract.node_address}, and its job spans nodes ({contract.world_size} ranks, "
            f"{contract.local_world_size} here): the other nodes cannot reach it. Give rank 0's node an "
            "`address:` the other nodes reach in the coordinator's nodes config (a node's address is its "
            "`address`, else `default_address`, else its id as a host name; docs/coordinator.md)")
