"""A cluster of local brokers: three (or more) combined broker+controllers on their own hosts, each
started by `trainmedic broker start --node-id N`, the controller quorum made of them all
(docs/security.md, "A cluster of brokers").

What the members share is one folder, made once by `trainmedic broker init --members ...` and copied
as it is to HOME/broker/cluster/ on every member (folder 0700):
  cluster.json   the KRaft cluster id and the members: node id -> the address clients reach it at
                 (its controller listens on the next port of the same host)
  secrets.json   the roles' passwords and the controller listener's PLAIN password (0600)
  ca.pem, ca.key the CA each member signs its own certificate with (ca.key 0600)
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from trainmedic.bus.acls import ADMIN
from trainmedic.bus.addresses import host_port, is_loopback, is_wildcard, split_host_port
from trainmedic.common.errors import BrokerError, ConfigError
from trainmedic.local import broker_auth, broker_tls
from trainmedic.local.broker_config import REPLICATED, Quorum, cluster_id
from trainmedic.local.broker_listen import BrokerState, Listener, listener_from

log = logging.getLogger(__name__)
MIN_MEMBERS = 3  # a quorum of two survives no failure: one member down stops both
FILES = ("cluster.json", "secrets.json", "ca.pem", "ca.key")


@dataclass(frozen=True)
class Cluster:
    """What every member is started with: the KRaft cluster id and the members (node id -> the
    HOST:PORT clients reach it at; its controller at PORT + 1 of that host)."""

    cluster_id: str
    members: Mapping[int, str]

    @property
    def bootstrap(self) -> str:
        """Every member's address: the role files' bootstrap.servers."""
        return ",".join(self.members[node] for node in sorted(self.members))

    @property
    def voters(self) -> str:
        """controller.quorum.voters: every member's controller."""
        return ",".join(f"{node}@{_controller(self.members[node])}" for node in sorted(self.members))


def parse_members(text: str) -> dict[int, str]:
    """`ID@HOST:PORT,...` (`--members`) as node id -> HOST:PORT; raises ConfigError saying what is wrong."""
    members: dict[int, str] = {}
    for entry in (part.strip() for part in text.split(",") if part.strip()):
        node, sep, address = entry.partition("@")
        if not sep or not node.isdigit():
            raise ConfigError(f"--members {entry!r} is not ID@HOST:PORT (a node id from 0, e.g. 1@h1:9092)")
        host, port = split_host_port(address, f"--members {node}@")
        if port >= 65535:
            raise ConfigError(f"--members {entry}: the controller listens on PORT + 1: give a port "
                              "below 65535")
        if is_wildcard(host):
            raise ConfigError(f"--members {entry}: give the host's name or address other hosts reach it at, "
                              "not a wildcard")
        if int(node) in members:
            raise ConfigError(f"--members names node {int(node)} twice")
        members[int(node)] = host_port(host, port)
    if len(set(members.values())) < len(members):
        raise ConfigError("--members gives two members the same address")
    if len(members) < MIN_MEMBERS:
        raise ConfigError(f"--members: a cluster has {MIN_MEMBERS} or more members (a quorum of two survives "
                          "no failure); a single broker needs no --members")
    loopback = {is_loopback(split_host_port(address)[0]) for address in members.values()}
    if len(loopback) > 1:
        raise ConfigError("--members mixes loopback and other addresses: every member must reach the others "
                          "(all on loopback is one machine's cluster, for tests)")
    return members


def make(folder: Path, members: dict[int, str], now: dt.datetime) -> tuple[Cluster, bool]:
    """The shared folder for a new cluster of `members`: a cluster id, every role's password and a CA.
    Returns the cluster and whether it was made (False: the folder holds this cluster already)."""
    if (folder / "cluster.json").exists():
        cluster = _read(folder)
        if dict(cluster.members) != members:
            raise ConfigError(f"{folder} holds the cluster of {cluster.bootstrap} already: move it away to "
                              "make another (with every member's broker/data formatted for it)")
        return cluster, False
    folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.mkdir(mode=0o700, exist_ok=True)
    folder.chmod(0o700)
    key, ca = broker_tls.new_ca(now)
    broker_auth.write_private(folder / "ca.key", key.decode())
    (folder / "ca.pem").write_bytes(ca)
    broker_auth.write_private(folder / "secrets.json", json.dumps(broker_auth.complete({}), indent=2))
    cluster = Cluster(cluster_id(), members)
    (folder / "cluster.json").write_text(json.dumps(
        {"cluster_id": cluster.cluster_id, "members": {str(k): v for k, v in members.items()}}, indent=2))
    return cluster, True


@dataclass(frozen=True)
class Member:
    """This host's member: its node id in the cluster whose shared files are in `folder`."""

    node_id: int
    cluster: Cluster
    folder: Path

    @classmethod
    def load(cls, folder: Path, node_id: int) -> Member:
        """The member `node_id` of the cluster copied to `folder`; its secret files made its owner's only."""
        cluster = _read(folder)
        if node_id not in cluster.members:
            raise ConfigError(f"--node-id {node_id} is not a member of the cluster in {folder} (nodes "
                              f"{', '.join(map(str, sorted(cluster.members)))}: {cluster.bootstrap})")
        folder.chmod(0o700)
        for name in ("secrets.json", "ca.key"):
            if (folder / name).exists():
                (folder / name).chmod(0o600)
        return cls(node_id, cluster, folder)

    @property
    def address(self) -> str:
        return self.cluster.members[self.node_id]

    @property
    def quorum(self) -> Quorum:
        return Quorum(self.node_id, self.cluster.voters, REPLICATED)

    def listener(self, listen: str | None, *, tls: bool, plaintext: bool) -> Listener:
        """Where this member listens (by default its address in the cluster), advertising its address."""
        host, port = split_host_port(self.address)
        if listen is not None and split_host_port(listen, "--listen")[1] != port:
            raise ConfigError(f"--listen {listen}: node {self.node_id} is at port {port} in the cluster "
                              f"({self.address}; its controller at {port + 1}): listen on that port")
        return listener_from(port, listen or self.address, self.address, tls=tls, plaintext=plaintext)

    def secrets(self) -> dict[str, str]:
        """The passwords every member shares; ConfigError when the folder lacks one."""
        found = broker_auth.read_secrets(self.folder / "secrets.json") or {}
        if not found.get(broker_auth.TELEMETRY) and found.get(ADMIN):
            # made before telemetry keys: each member derives the same secret, no folder copied again
            found = {**found, broker_auth.TELEMETRY: hashlib.sha256(
                b"trainmedic telemetry\0" + found[ADMIN].encode()).hexdigest()}
        missing = sorted(set(broker_auth.complete({})) - {k for k, v in found.items() if v})
        if missing:
            raise ConfigError(f"{self.folder / 'secrets.json'} lacks {', '.join(missing)}: copy the cluster "
                              "folder again from the host it was made on")
        return found

    def install_ca(self, tls_dir: Path) -> None:
        """Put the cluster's CA in the broker's TLS folder (a certificate signed by another is made anew)."""
        tls_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        for name, write in (("ca.key", broker_auth.write_private), ("ca.pem", _write_public)):
            if not (self.folder / name).exists():
                raise ConfigError(f"{self.folder / name} is missing: copy the cluster folder again from "
                                  "the host it was made on (or give --tls-ca, --tls-cert and --tls-key)")
            shared = (self.folder / name).read_text()
            if not (tls_dir / name).exists() or (tls_dir / name).read_text() != shared:
                write(tls_dir / name, shared)

    def check_storage(self, data: Path) -> None:
        """Refuse storage formatted for another cluster or node (a single broker's, an older cluster's)."""
        try:
            lines = (data / "meta.properties").read_text().splitlines()
        except FileNotFoundError:
            return
        meta = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))
        found = (meta.get("cluster.id"), meta.get("node.id"))
        if found != (self.cluster.cluster_id, str(self.node_id)):
            raise BrokerError(f"{data} is formatted for cluster {found[0]} as node {found[1]}, not for this "
                              f"cluster ({self.cluster.cluster_id}) as node {self.node_id}: move it away "
                              "(its topics go with it) to start this member")


def refusal(running: BrokerState, member: Member | None) -> str | None:
    """Why the running broker is not the one asked for, another node id or cluster size (None: it is)."""
    node, members = (member.node_id, len(member.cluster.members)) if member else (1, 1)
    if (running.node_id, running.members) == (node, members):
        return None
    return (f"the broker runs as {_which(running.node_id, running.members)} already (pid {running.pid}): "
            f"`trainmedic broker stop` first to start it as {_which(node, members)}")


def shutdown_wait_s(folder: Path, node_id: int, timeout_s: float, answers: Callable[[str, int], bool],
                    without_quorum_s: float = 3.0) -> float:
    """How long a member's stop waits for it to exit cleanly: `timeout_s` while it and the controllers
    that answer are a majority (the active controller hands its partitions over); `without_quorum_s`
    otherwise (the last members: no controller would ever answer, so it could only wait minutes)."""
    try:
        cluster = _read(folder)
    except ConfigError:
        return timeout_s
    peers = [split_host_port(_controller(a)) for node, a in cluster.members.items() if node != node_id]
    if 1 + sum(answers(host, port) for host, port in peers) > len(cluster.members) // 2:
        return timeout_s
    log.info("no majority of the cluster's controllers answers: node %d cannot hand its partitions over "
             "cleanly; stopping it after %.0fs", node_id, without_quorum_s)
    return without_quorum_s


def _read(folder: Path) -> Cluster:
    """The cluster in `folder`/cluster.json; ConfigError when it is missing or not one."""
    path = folder / "cluster.json"
    try:
        found = json.loads(path.read_text())
        return Cluster(str(found["cluster_id"]), {int(k): str(v) for k, v in found["members"].items()})
    except FileNotFoundError:
        raise ConfigError(f"no cluster in {folder}: make it once on one host with `trainmedic broker init "
                          "--members ID@HOST:PORT,...` and copy that host's folder here") from None
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise ConfigError(f"{path} is not a cluster's ({err!r}): copy the folder again") from None


def _which(node: int, members: int) -> str:
    return f"node {node} of a {members}-member cluster" if members > 1 else "a single broker"


def _controller(address: str) -> str:
    host, port = split_host_port(address)
    return host_port(host, port + 1)


def _write_public(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o644)
