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
import logging
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmedic.bus import acls, credentials
from trainmedic.bus.addresses import split_host_port
from trainmedic.bus.settings import KafkaSettings, credentials_dir
from trainmedic.common.errors import ConfigError
from trainmedic.common.yaml_file import load_mapping
from trainmedic.producers.config import GpuProducerConfig
from trainmedic.recovery import keyring
from trainmedic.recovery.join_token import NODE_FILES, parse, public_key_model, token_key
from trainmedic.registrar_client import (
    TIMEOUT_S,
    JoinRefused,
    answer_of,
    fetch_ca,
    files_of,
    request,
    said,
    token_argument,
    trust,
    verifying,
    write_folder,
)
from trainmedic.schemas import NodeRegistered, PublicKey, encode

log = logging.getLogger("trainmedic.node")

UNCOUNTED_GPUS = 8  # registered for a node whose GPUs NVML cannot count


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
    if parsed.node is None:
        raise ConfigError(f"the token invites a control-plane host of {', '.join(parsed.roles)}, not a node: "
                          "run `trainmedic join` with it")
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
    status, answer = request(host, parsed.port, "POST", "/join", encode(registration), verifying(ca_pem),
                             timeout_s)
    if status != 200:
        raise JoinRefused(f"the registrar at {host}:{parsed.port} refused node {parsed.node!r} "
                          f"(HTTP {status}): {said(answer)}")
    files, coordinators = files_of(answer, NODE_FILES), _coordinators(answer)
    trusted = tuple(trust(keys_dir, key, keyring.COORDINATOR, now) for key in coordinators)
    write_folder(folder, files)
    return Joined(parsed.node, folder, trusted)


def _coordinators(answer: bytes) -> list[PublicKey]:
    keys = answer_of(answer).get("coordinators")
    if not isinstance(keys, list) or not keys:
        raise JoinRefused("the registrar's answer names no coordinator key")
    try:
        return [PublicKey.model_validate(key) for key in keys]
    except ValueError as err:
        raise JoinRefused(f"the registrar's answer holds a coordinator key that is none: {err}") from None


def _not_joined(folder: Path, node: str) -> None:
    found = credentials.read_role(folder, "executor")
    if found is not None and found.get("sasl.username") == acls.node_principal(node):
        raise ConfigError(f"already joined: {folder} holds node {node!r}'s credentials: run `trainmedic "
                          "node` without --join")


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
