"""A principal per node, on the broker's host: `add-node NAME` makes the SCRAM user `node-NAME` with the
ACLs of a node's agent and executor for the broker's prefixes and the telemetry quota, and writes the
folder the node runs with (its role files, the CA, its own telemetry key); `remove-node NAME` deletes
the user and every ACL naming it, so the node's writes are refused at its next request
(docs/security.md, "One identity per node").
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from trainmedic.bus import acls, credentials, telemetry_keys
from trainmedic.bus.admin import grant_roles, retire_users, set_scram_users
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import BrokerError, ConfigError
from trainmedic.local import broker_auth, broker_limits
from trainmedic.local.broker import LocalBroker
from trainmedic.local.broker_cluster import Member
from trainmedic.local.broker_limits import TELEMETRY
from trainmedic.local.broker_listen import Listener, split_host_port

NODE_ROLES = ("agent", "executor")  # the parts of `trainmedic node`: one principal, the node's
PASSWORDS_FILE = "nodes.json"  # under HOME/broker: each node's password, replaced whole (0600)


def principal(node: str) -> str:
    try:
        return acls.node_principal(node)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def running(home: Path, credentials_dir: Path) -> LocalBroker:
    """The broker running from `home`, at the address and with the TLS it runs with."""
    found = LocalBroker(home, credentials_dir=credentials_dir).state()
    if found is None:
        raise BrokerError(f"no broker runs from {home}: add and remove nodes on the broker's host, "
                          "where `trainmedic broker start` ran")
    if not found.secure:
        raise BrokerError("the broker runs --insecure: it has no users, so no node principals")
    host, port = split_host_port(found.advertise) if found.advertise else ("", 0)
    listener = Listener(host=found.host, port=found.port, controller_port=found.controller_port,
                        advertise_host=host, advertise_port=port, tls=found.tls)
    cluster = home / "broker" / "cluster"
    member = Member.load(cluster, found.node_id) if found.members > 1 else None
    return LocalBroker(home, listener=listener, credentials_dir=credentials_dir, member=member)


def admin_settings(broker: LocalBroker) -> KafkaSettings:
    return KafkaSettings.from_env({"TRAINMEDIC_CREDENTIALS_DIR": str(broker.credentials)}, role=acls.ADMIN)


def add(broker: LocalBroker, node: str, prefixes: tuple[str, ...], out: Path | None = None, *,
        rotate: bool = False) -> Path:
    """Node `node`'s principal, ACLs and quota on the running broker, and its folder (`out`, by default
    broker/nodes/NODE/): the role files of its agent and executor, the CA of a TLS broker and its
    telemetry key. Again for a node already added: the same password, the folder written anew; with
    `rotate`, a new password (a node joining anew: the host that had the old one may be another)."""
    user = principal(node)
    folder = out or broker.dir / "nodes" / node
    if folder.resolve() == broker.credentials.resolve():
        raise ConfigError(f"--out {folder} is the broker host's own credentials folder: the node's folder "
                          "would replace its role files and the telemetry master key; give another")
    passwords = node_passwords(broker)
    password = (None if rotate else passwords.get(node)) or secrets.token_urlsafe(24)
    if passwords.get(node) != password:
        passwords[node] = password
        _write_passwords(broker, passwords)
    admin = admin_settings(broker)
    set_scram_users(admin, {user: password})
    for prefix in prefixes:
        grant_roles(admin, prefix, nodes=(user,))
    with broker.admin_tool(admin.secrets["sasl.password"].get_secret_value()) as tool:
        broker_limits.set_quotas(tool, {user: TELEMETRY})
    ca = broker.ca
    config = broker_auth.role_config(user, password, bootstrap=broker.bootstrap,
                                     ca=credentials.CA_FILE if ca else None)
    credentials.write_roles(folder, dict.fromkeys(NODE_ROLES, config), ca.read_bytes() if ca else None)
    master = telemetry_keys.read_key(broker.credentials / telemetry_keys.MASTER_FILE)
    if master is None:
        raise BrokerError(f"no telemetry master key in {broker.credentials}: start the broker again "
                          "(`trainmedic broker start` makes it)")
    telemetry_keys.write_key(folder / telemetry_keys.NODE_FILE, telemetry_keys.for_node(master, node))
    return folder


def remove(broker: LocalBroker, node: str) -> bool:
    """The node's principal and every ACL naming it deleted: its clients' next requests are refused.
    False when the broker had no such node (nothing to remove)."""
    user = principal(node)
    passwords = node_passwords(broker)
    retire_users(admin_settings(broker), (user,))
    known = passwords.pop(node, None) is not None
    _write_passwords(broker, passwords)
    folder = broker.dir / "nodes" / node
    for path in (*folder.glob("*"),) if folder.is_dir() else ():
        path.unlink()
    if folder.is_dir():
        folder.rmdir()
    return known


def node_passwords(broker: LocalBroker) -> dict[str, str]:
    """Each node that has a principal on `broker`, and its password."""
    return broker_auth.read_secrets(broker.dir / PASSWORDS_FILE) or {}


def _write_passwords(broker: LocalBroker, passwords: dict[str, str]) -> None:
    """Replaced whole, so that the registrar, reading it every poll, never reads half a file."""
    path = broker.dir / PASSWORDS_FILE
    tmp = path.with_name(f".{path.name}.tmp")
    broker_auth.write_private(tmp, json.dumps(passwords, indent=2))
    os.replace(tmp, path)
