"""`trainmedic node --join @TOKEN_FILE` (or `--join -`, the token on stdin): a node enrolled by an
operator (`trainmedic nodes enroll`) gets its own Kafka principal and the coordinators' keys from the
broker's registrar, before it starts.

It fetches the broker's CA from the registrar (the first --bootstrap host, the token's port) and
refuses it unless its SHA-256 is the token's pin; every later request verifies TLS against that CA.
It makes the node's own key, registers it signed by the token's key, and writes what the registrar
answers: the node's credentials folder, and each coordinator key trusted as coordinator
(docs/security.md, "One identity per node"). A token given on the command line itself works too, but
stays in the process list (/proc/PID/cmdline) and the shell's history while the node runs.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import http.client
import json
import logging
import os
import socket
import ssl
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from trainmedic.bus import acls, credentials
from trainmedic.bus.addresses import split_host_port
from trainmedic.bus.settings import KafkaSettings, credentials_dir
from trainmedic.common.errors import ConfigError, TrainmedicError
from trainmedic.common.yaml_file import load_mapping
from trainmedic.producers.config import GpuProducerConfig
from trainmedic.recovery import keyring
from trainmedic.recovery.join_token import (
    MAX_TOKEN,
    NODE_FILES,
    JoinToken,
    ca_pin,
    parse,
    public_key_model,
    public_of,
    token_key,
)
from trainmedic.schemas import NodeRegistered, PublicKey, encode

log = logging.getLogger("trainmedic.node")

MAX_ANSWER = 1024 * 1024  # bytes read of one answer of the registrar
TIMEOUT_S = 30.0
UNCOUNTED_GPUS = 8  # registered for a node whose GPUs NVML cannot count


class JoinRefused(TrainmedicError):
    """The registrar, or the broker it stands for, would not let this node join: nothing was written."""


@dataclass(frozen=True)
class Joined:
    """A node that joined: its name, its credentials folder, the coordinator keys it now trusts."""

    node: str
    folder: Path
    coordinators: tuple[str, ...]


def join(token: str, bootstrap: str, *, folder: Path, keys_dir: Path, address: str, gpus: int, prefix: str,
         now: float, node: str | None = None, timeout_s: float = TIMEOUT_S) -> Joined:
    """Redeem `token` at the registrar of the broker `bootstrap` names: the node's credentials written to
    `folder` and the coordinators' keys trusted in `keys_dir`, where the node's own key is made. A
    ConfigError for what this host must fix, JoinRefused for what the registrar or the CA refused."""
    try:
        parsed = parse(token)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if node is not None and node != parsed.node:
        raise ConfigError(f"the token enrolls node {parsed.node!r}, not --node {node!r}: drop --node, or ask "
                          f"the operator for a token of {node!r}")
    _not_joined(folder, parsed.node)
    host, _ = split_host_port(bootstrap.split(",")[0].strip(), "--bootstrap")
    ca_pem = fetch_ca(host, parsed, timeout_s)
    keyring.ensure_key(keys_dir, now, keyring.node_role(parsed.node))
    own = keyring.load_signing(keys_dir, keyring.node_role(parsed.node))
    registration = token_key(parsed.secret).sign(NodeRegistered(
        ts=now, node=parsed.node, key=public_key_model(own.private.public_key()), address=address, gpus=gpus,
        deployment=prefix))
    status, answer = _request(host, parsed.port, "POST", "/join", encode(registration),
                              _verifying(ca_pem), timeout_s)
    if status != 200:
        raise JoinRefused(f"the registrar at {host}:{parsed.port} refused node {parsed.node!r} "
                          f"(HTTP {status}): {_said(answer)}")
    files, coordinators = _files(answer), _coordinators(answer)
    trusted = tuple(_trust(keys_dir, key, now) for key in coordinators)
    _write(folder, files)
    return Joined(parsed.node, folder, trusted)


def fetch_ca(host: str, token: JoinToken, timeout_s: float = TIMEOUT_S) -> bytes:
    """The CA the registrar serves, fetched without verification, and kept only if the token pins it."""
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    status, ca_pem = _request(host, token.port, "GET", "/ca", None, unverified, timeout_s)
    if status != 200:
        raise JoinRefused(f"the registrar at {host}:{token.port} did not give its CA (HTTP {status})")
    if ca_pin(ca_pem) != token.ca_sha256:
        raise JoinRefused(f"the CA served at {host}:{token.port} (SHA-256 {ca_pin(ca_pem)}) is not the one "
                          f"the token pins ({token.ca_sha256}): a man in the middle, or another broker than "
                          "the operator's (check --bootstrap); nothing was sent")
    return ca_pem


def _verifying(ca_pem: bytes) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cadata=ca_pem.decode("ascii"))
    except (ssl.SSLError, ValueError) as err:
        raise JoinRefused(f"the pinned CA is no PEM certificate: {err}") from None


def _request(host: str, port: int, method: str, path: str, body: bytes | None, context: ssl.SSLContext,
             timeout_s: float) -> tuple[int, bytes]:
    connection = http.client.HTTPSConnection(host, port, context=context, timeout=timeout_s)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read(MAX_ANSWER)
    except ssl.SSLCertVerificationError as err:
        raise JoinRefused(f"the registrar at {host}:{port} has no certificate of the pinned CA for {host}: "
                          f"{err.verify_message}") from None
    except (OSError, http.client.HTTPException) as err:
        raise JoinRefused(f"cannot reach the registrar at {host}:{port} (`trainmedic broker registrar` on "
                          f"the broker's host): {err}") from None
    finally:
        connection.close()


def _said(answer: bytes) -> str:
    try:
        return str(json.loads(answer)["error"])
    except (ValueError, KeyError, TypeError):
        return answer[:300].decode("utf-8", "replace")


def _answer(answer: bytes) -> dict:
    try:
        found = json.loads(answer)
    except ValueError:
        found = None
    if not isinstance(found, dict):
        raise JoinRefused("the registrar's answer is no JSON object")
    return found


def _files(answer: bytes) -> dict[str, bytes]:
    files = _answer(answer).get("files")
    if not isinstance(files, dict) or set(files) != set(NODE_FILES):
        raise JoinRefused(f"the registrar's answer holds no node folder ({', '.join(NODE_FILES)})")
    try:
        return {name: base64.b64decode(str(data), validate=True) for name, data in files.items()}
    except (binascii.Error, ValueError):
        raise JoinRefused("the registrar's answer holds files that are not base64") from None


def _coordinators(answer: bytes) -> list[PublicKey]:
    keys = _answer(answer).get("coordinators")
    if not isinstance(keys, list) or not keys:
        raise JoinRefused("the registrar's answer names no coordinator key")
    try:
        return [PublicKey.model_validate(key) for key in keys]
    except ValueError as err:
        raise JoinRefused(f"the registrar's answer holds a coordinator key that is none: {err}") from None


def _trust(keys_dir: Path, key: PublicKey, now: float) -> str:
    """`key` trusted in `keys_dir` as a coordinator's (its PEM written to a file of its own first)."""
    try:
        public = public_of(key)
    except ValueError as err:
        raise JoinRefused(f"the registrar's answer: {err}") from None
    pem = public.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    with tempfile.TemporaryDirectory(prefix="trainmedic-join-") as where:
        path = Path(where) / f"{key.key_id}.pub"
        path.write_bytes(pem)
        return keyring.trust_key(keys_dir, path, keyring.COORDINATOR, now)


def _not_joined(folder: Path, node: str) -> None:
    found = credentials.read_role(folder, "executor")
    if found is not None and found.get("sasl.username") == acls.node_principal(node):
        raise ConfigError(f"already joined: {folder} holds node {node!r}'s credentials: run `trainmedic "
                          "node` without --join")


def _write(folder: Path, files: Mapping[str, bytes]) -> None:
    """The node's folder: mode 0700, each file 0600, each replaced whole."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    for name, data in files.items():
        tmp = folder / f".{name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        tmp.chmod(0o600)
        tmp.replace(folder / name)


def token_argument(value: str, stdin: TextIO = sys.stdin) -> str:
    """The token `--join` names: `@PATH` the file's first line, `-` a line of stdin, else the value
    itself (said in a WARNING: it stays visible in the process list while the node runs)."""
    if value == "-":
        return stdin.readline(MAX_TOKEN + 2).strip()
    if value.startswith("@"):
        try:
            with open(value[1:], encoding="utf-8", errors="replace") as file:
                return file.readline(MAX_TOKEN + 2).strip()
        except OSError as err:
            raise ConfigError(f"--join {value}: cannot read the token file: {err.strerror or err}") from None
    log.warning("the join token given on the command line stays visible in the process list "
                "(/proc/PID/cmdline) and in the shell's history while this node runs: pass --join @FILE "
                "(a file only you can read, deleted once joined) or --join - (the token on stdin)")
    return value


def gpu_count(args: argparse.Namespace, env: Mapping[str, str], nvml: Any = None) -> int:
    """The GPUs this node registers: synthetic ones as --gpu-gpus-per-node sets them (its default
    else), else as many as NVML counts (`nvml`: the pynvml module; tests pass a stand-in)."""
    if _setting(args, env, "gpu", "source") == "synthetic":
        given = _setting(args, env, "gpu", "gpus_per_node")
        return int(given or GpuProducerConfig.model_fields["gpus_per_node"].default)
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError as err:
            log.warning("NVML cannot count this node's GPUs (nvidia-ml-py is not installed: %s): "
                        "registering %d", err, UNCOUNTED_GPUS)
            return UNCOUNTED_GPUS
    try:
        nvml.nvmlInit()
        try:
            count = int(nvml.nvmlDeviceGetCount())
        finally:
            nvml.nvmlShutdown()
    except nvml.NVMLError as err:  # no driver, no permission
        log.warning("NVML cannot count this node's GPUs (%s): registering %d", err, UNCOUNTED_GPUS)
        return UNCOUNTED_GPUS
    if count < 1:
        log.warning("NVML counts no GPU on this node: registering %d", UNCOUNTED_GPUS)
        return UNCOUNTED_GPUS
    return count


def before_start(args: argparse.Namespace, env: Mapping[str, str] = os.environ) -> Joined:
    """`trainmedic node --join @FILE|-|TOKEN`: join with the node's own settings (--keys-dir,
    --data-address, its GPUs: flag, variable or --config), its node name set from the token."""
    bootstrap = args.bootstrap or env.get("TRAINMEDIC_KAFKA_BOOTSTRAP")
    if not bootstrap:
        raise ConfigError("--join needs --bootstrap HOST:PORT: the broker, whose host runs the registrar")
    token = token_argument(args.join)
    given = _setting(args, env, "executor", "node")
    keys_dir = Path(_setting(args, env, "executor", "keys_dir") or keyring.default_dir())
    address = _setting(args, env, "executor", "data_address") or socket.gethostname()
    prefix = KafkaSettings.from_env(env, bootstrap=bootstrap).topic_prefix
    joined = join(token, bootstrap, folder=credentials_dir(env), keys_dir=keys_dir, address=str(address),
                  gpus=gpu_count(args, env), prefix=prefix, now=time.time(),
                  node=None if given is None else str(given))
    setattr(args, "TRAINMEDIC_EXECUTOR_NODE", joined.node)  # noqa: B010 (the option's dest is its variable)
    log.info("joined as %s: credentials in %s, %d coordinator keys trusted (%s)", joined.node, joined.folder,
             len(joined.coordinators), ", ".join(joined.coordinators))
    return joined


def _setting(args: argparse.Namespace, env: Mapping[str, str], section: str, name: str) -> object:
    """One of `trainmedic node`'s settings as its config will read it: flag, variable, then --config."""
    dest = f"TRAINMEDIC_{section.upper()}_{name.upper()}"
    found = getattr(args, dest, None) or env.get(dest)
    if found is None and getattr(args, "config", None):
        found = (load_mapping(args.config).get(section) or {}).get(name)
    return found
