"""How the local broker protects itself: connection caps in server.properties and byte-rate quotas
per principal, so that one role's credentials (or none) cannot exhaust its file descriptors, fill
its disk or starve the others (docs/security.md, "The broker protects itself, and what is rendered").
"""

from __future__ import annotations

import resource
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainmedic.common.errors import BrokerError

MiB = 1 << 20
ConfigTool = Callable[..., list[str]]  # ConfigCommand's arguments -> the command line that runs it


@dataclass(frozen=True)
class Connections:
    """Connection caps: per client address, and in all on the client listener."""

    per_ip: int = 1_000
    total: int = 4_000
    failed_auth_delay_ms: int = 1_000

    @classmethod
    def for_files(cls, open_files: int) -> Connections:
        """Caps that leave the broker three quarters of its `open_files` (log segments, its own links)."""
        total = max(64, min(cls.total, open_files // 4))
        return cls(per_ip=min(cls.per_ip, total), total=total)


@dataclass(frozen=True)
class Quota:
    """Bytes per second one principal may produce and fetch, all its clients together."""

    producer_byte_rate: int
    consumer_byte_rate: int

    def config(self) -> str:
        return f"producer_byte_rate={self.producer_byte_rate},consumer_byte_rate={self.consumer_byte_rate}"


# A 16,384-GPU cluster at 1 Hz writes ~16k GPU samples and ~2k heartbeats a second (agent) and ~16k
# rank steps (executor): a few MiB/s each. Their bound is several times that; a compromised
# writer's 1 GB takes half a minute instead of two seconds. Control roles and the admin are bounded
# far above any bench (the live detector bench's 150k events/s are ~40 MiB/s).
TELEMETRY = Quota(producer_byte_rate=32 * MiB, consumer_byte_rate=64 * MiB)
DEFAULT = Quota(producer_byte_rate=256 * MiB, consumer_byte_rate=512 * MiB)
# None: every user without its own.
QUOTAS: dict[str | None, Quota] = {None: DEFAULT, "agent": TELEMETRY, "executor": TELEMETRY}


def connection_properties(limits: Connections, listener: str) -> str:
    """server.properties lines for the caps; `listener` is the client listener's name (it is also
    the inter-broker one, which the broker-wide cap does not bound, hence its own cap)."""
    return f"""\
max.connections.per.ip={limits.per_ip}
max.connections={limits.total}
listener.name.{listener.lower()}.max.connections={limits.total}
connection.failed.authentication.delay.ms={limits.failed_auth_delay_ms}
"""


def quota_arguments(user: str | None, quota: Quota) -> list[str]:
    """ConfigCommand's arguments that set `quota` for `user` (None: the default user)."""
    entity = ["--entity-default"] if user is None else ["--entity-name", user]
    return ["--alter", "--entity-type", "users", *entity, "--add-config", quota.config()]


def set_quotas(tool: ConfigTool, quotas: dict[str | None, Quota]) -> None:
    """Give each user (None: the default) its quota on the broker `tool` reaches."""
    _run({f"setting the quota of {user or 'every user'}": tool(*quota_arguments(user, quota))
          for user, quota in quotas.items()})


def described_quotas(tool: ConfigTool) -> dict[str | None, dict[str, float]]:
    """The users' quotas as the broker has them (None: the default user's)."""
    users = ("--describe", "--entity-type", "users")
    outputs = _run({"describing the quotas": tool(*users),
                    "describing the default quota": tool(*users, "--entity-default")})
    return parse_described("\n".join(outputs))


def _run(commands: dict[str, list[str]]) -> list[str]:
    """Run the commands side by side (a JVM each: seconds); their outputs, or the first failure."""
    running = {what: subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for what, command in commands.items()}
    outputs = {what: proc.communicate()[0] for what, proc in running.items()}
    for what, proc in running.items():
        if proc.returncode != 0:
            raise BrokerError(f"{what} failed:\n{outputs[what][-2000:]}")
    return list(outputs.values())


def parse_described(text: str) -> dict[str | None, dict[str, float]]:
    """ConfigCommand's `--describe --entity-type users` output as user (None: default) -> settings."""
    found: dict[str | None, dict[str, float]] = {}
    for line in text.splitlines():
        head, sep, settings = line.partition(" are ")
        if sep and head == "Quota configs for the default user-principal":
            user = None
        elif sep and head.startswith("Quota configs for user-principal '"):
            user = head.removeprefix("Quota configs for user-principal ").strip("'")
        else:
            continue
        found[user] = {k: float(v) for k, v in (kv.split("=", 1) for kv in settings.split(", ") if "=" in kv)}
    return found


def open_files() -> int:
    """The open-file limit the broker will run with (the JVM raises its soft limit to the hard one)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if hard == resource.RLIM_INFINITY else hard


def cluster_of(data: Path) -> str:
    """The cluster id formatted into `data` (a reformatted folder is a new cluster, without quotas)."""
    for line in (data / "meta.properties").read_text().splitlines():
        if line.startswith("cluster.id="):
            return line.removeprefix("cluster.id=")
    return ""
