"""Telemetry a node wrote, provably: every record on a telemetry topic carries a MAC by the key of the
node it is about (header `tm-mac`), checked where the detector reads it. A node's key is derived from
the deployment's telemetry master key, which only the broker's host and the detector hold; a node holds
its own key only, so it can speak for itself and for no other node (docs/security.md, "One identity per
node").
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trainmedic.bus._tagcheck import HEADER, keyed
from trainmedic.bus._tagcheck import tag as tag_of
from trainmedic.common.errors import ConfigError

__all__ = ["HEADER", "MASTER_FILE", "NODE_FILE", "Signer", "TelemetryKey", "Verifier", "node_key",
           "for_node", "read_key", "tag", "verifier_of", "write_key"]

MASTER_FILE = "telemetry-master.key"  # beside the detector's role file, and on the broker's host
NODE_FILE = "telemetry.key"  # beside a node's role files: its own key
_PERSON = b"trainmedic-node1"  # blake2b personalisation (16 bytes): keys of nodes, version 1
MAX_CACHED = 65_536  # derived keys a verifier keeps; past it the cache starts over


def node_key(master: bytes, node: str) -> bytes:
    """Node `node`'s telemetry key: a keyed BLAKE2b of its name under the master key."""
    return hashlib.blake2b(node.encode(), key=master, digest_size=32, person=_PERSON).digest()


def deployment_key(key: bytes, prefix: str) -> bytes:
    """A node's 16-byte tag key for the deployment under `prefix` (its topic prefix): a record copied
    to another deployment's topics does not verify there (the node, holding its own key, can tag for
    any)."""
    return hashlib.blake2b(prefix.encode(), key=key, digest_size=16).digest()


def tag(key: bytes, value: bytes) -> bytes:
    """The `tm-mac` header's value: the value's SipHash-2-4-128 under the node's tag key for the
    deployment (`deployment_key`), made in C (bus/_tagcheck.c). Producers keep `keyed(key)` and call
    `_tagcheck.tag` on it; a later format gets a header of its own."""
    return tag_of(keyed(key), value)


@dataclass(frozen=True)
class TelemetryKey:
    """A key file: a node's own key (`node` names it), or the master (`node` None) from which every
    node's key is derived."""

    key: bytes = field(repr=False)
    node: str | None

    @property
    def master(self) -> bool:
        return self.node is None


def read_key(path: Path) -> TelemetryKey | None:
    """The key in `path` (JSON: `key` hex, and `node` for a node's key), or None when there is none."""
    try:
        data = json.loads(path.read_text())
        key = bytes.fromhex(data["key"])
        node = data.get("node")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"cannot read the telemetry key {path}: {err}") from None
    if len(key) != 32 or not (node is None or isinstance(node, str) and node):
        raise ConfigError(f"{path} is not a telemetry key (32 bytes, and a node name for a node's key)")
    return TelemetryKey(key, node)


def for_node(master: TelemetryKey, node: str) -> TelemetryKey:
    """Node `node`'s own key, derived from `master`."""
    return TelemetryKey(node_key(master.key, node), node)


def write_key(path: Path, key: TelemetryKey) -> None:
    """`key` in `path` (mode 0600, its folder 0700 when made here)."""
    data = {"key": key.key.hex()} if key.master else {"node": key.node, "key": key.key.hex()}
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(data, out)
    tmp.chmod(0o600)
    tmp.replace(path)


class Signer:
    """Tags what a producer writes to its deployment's (`prefix`) telemetry topics. With a node's key
    every record gets that key's tag (a record about another node will not verify: the detector
    refuses it); with the master (one machine holding every part, the demo and the tests) each record
    gets its own node's."""

    def __init__(self, key: TelemetryKey, prefix: str) -> None:
        self._key = key
        self._prefix = prefix
        self._own = None if key.master else keyed(deployment_key(key.key, prefix))
        self._derived: dict[str, bytes] = {}  # node -> its keyed state, with the master

    def headers(self, value: bytes, node: str | None) -> list[tuple[str, bytes]]:
        state = self._own or self._of(node)
        return [] if state is None else [(HEADER, tag_of(state, value))]

    def _of(self, node: str | None) -> bytes | None:
        if node is None:
            return None
        state = self._derived.get(node)
        if state is None:
            if len(self._derived) >= MAX_CACHED:
                self._derived.clear()
            state = self._derived[node] = keyed(deployment_key(node_key(self._key.key, node), self._prefix))
        return state


class Verifier:
    """Checks that a telemetry record of the deployment `prefix` was written by the node it names: its
    `tm-mac` is that node's. On the detector's hot path `Pipeline.on_fetch` checks a record of a node
    whose key is in `keys` itself (`_tagcheck.first`, one call in C), and asks `refused` of any other."""

    def __init__(self, master: bytes, prefix: str) -> None:
        self._master = master
        self._prefix = prefix
        self.keys: dict[str, bytes] = {}  # node -> the state keyed with its key for this deployment

    def ok(self, value: bytes, node: str, headers: Sequence[tuple[str, bytes]] | None) -> bool:
        """Whether the record carries node `node`'s tag (`headers` as pairs: confluent-kafka, aiokafka;
        a value that is not bytes, a null header, is no tag). A node's key is kept once a record of its
        verified, so names a forger makes up never push out the real nodes' keys."""
        known = self.keys.get(node)
        state = known or keyed(deployment_key(node_key(self._master, node), self._prefix))
        expected = tag_of(state, value)  # once: a forger's record may carry any number of headers
        if not any(name == HEADER and type(data) is bytes and hmac.compare_digest(data, expected)
                   for name, data in headers or ()):
            return False
        if known is None:
            if len(self.keys) >= MAX_CACHED:
                self.keys.clear()
            self.keys[node] = state
        return True

    def refused(self, value: bytes, node: str,
                headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None) -> str | None:
        """None when the record carries node `node`'s tag, else why it is refused. `headers` as a
        client gives them: pairs (confluent-kafka, aiokafka) or a mapping (Faust). (The common record,
        a known node's with its tag first in a list, `Pipeline` takes by `first` before asking.)"""
        pairs = (headers if isinstance(headers, list)
                 else list(headers.items() if isinstance(headers, Mapping) else headers or ()))
        if self.ok(value, node, pairs):
            return None
        if not any(name == HEADER for name, _ in pairs):
            return f"unverified: not written by node {node!r}: the record carries no {HEADER}"
        return f"unverified: not written by node {node!r}: its {HEADER} is another key's"


def verifier_of(key: TelemetryKey | None, prefix: str, log: logging.Logger) -> Verifier | None:
    """The detector's check of telemetry, from the master key its settings hold; without one, said loudly."""
    if key is None:
        log.warning("INSECURE: no telemetry master key (%s beside the detector's role file, or "
                    "TRAINMEDIC_TELEMETRY_KEY_FILE): telemetry is not checked, and any writer of the "
                    "telemetry topics speaks for every node", MASTER_FILE)
        return None
    return Verifier(key.key, prefix)


def env_key(env: Mapping[str, str], folder: Path, name: str) -> TelemetryKey | None:
    """The key a process uses: TRAINMEDIC_TELEMETRY_KEY_FILE, else `name` in its credentials folder."""
    given = env.get("TRAINMEDIC_TELEMETRY_KEY_FILE")
    if given:
        found = read_key(Path(given).expanduser())
        if found is None:
            raise ConfigError(f"TRAINMEDIC_TELEMETRY_KEY_FILE names {given}, which does not exist")
        return found
    return read_key(folder / name)
