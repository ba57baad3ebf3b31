"""Join this host to the control plane with a token from the broker's host (`trainmedic broker invite
ROLE...`): it gets its roles' credentials and the deployment's coordinator and operator keys from the
broker's registrar, and registers the keys it signs with. Nothing is copied between hosts but the token.

  trainmedic join @TOKEN_FILE --bootstrap HOST:PORT      (or `-`: the token on stdin)

The CA the registrar serves is kept only if its SHA-256 is the token's pin; every later request
verifies TLS against it. A coordinator's or an operator's key pair is made here (--keys-dir) unless one
is there, and its public half is trusted on the broker's host for that role. The answer's role files
go to the credentials folder (TRAINMEDIC_CREDENTIALS_DIR, else $TRAINMEDIC_HOME/credentials), each 0600;
the coordinators' keys are trusted here as coordinator, and on a coordinator's host the operators' keys
as operator. Keys trusted on the broker's host later reach this host by `trainmedic keys sync`
(docs/deployment.md, step 3).
"""

from __future__ import annotations

import argparse
import base64
import logging
import os
import time
from pathlib import Path

from trainmedic.bus.settings import KafkaSettings, credentials_dir
from trainmedic.common.errors import ConfigError
from trainmedic.ops.prologue import run_command
from trainmedic.recovery import keyring
from trainmedic.recovery.join_token import (
    SIGNING_ROLES,
    parse,
    possession,
    public_key_model,
    role_files,
    token_key,
)
from trainmedic.registrar_client import (
    TIMEOUT_S,
    JoinRefused,
    Synced,
    adopt,
    answer_of,
    fetch_ca,
    files_of,
    first_host,
    request,
    said,
    token_argument,
    verifying,
    write_folder,
)
from trainmedic.schemas import HostJoin, RoleKey, encode

log = logging.getLogger("trainmedic.join")



def join(token: str, bootstrap: str, *, folder: Path, keys_dir: Path, prefix: str, now: float,
         timeout_s: float = TIMEOUT_S) -> tuple[tuple[str, ...], Synced]:
    """Redeem a host's `token` at the registrar of `bootstrap`: its roles' files written to `folder`,
    its signing keys made in `keys_dir` and the directory's keys trusted there. Returns (roles, Synced).
    ConfigError for what this host must fix, JoinRefused for what the registrar or the CA refused."""
    try:
        parsed = parse(token)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if parsed.node is not None:
        raise ConfigError(f"the token enrolls node {parsed.node!r}: run `trainmedic node --join` with it")
    taken = [name for name in role_files(parsed.roles)[1:] if (folder / name).exists()]
    if taken:
        raise ConfigError(f"already joined: {folder} holds {', '.join(taken)}; move them away to join again")
    host = first_host(bootstrap)
    ca_pem = fetch_ca(host, parsed, timeout_s)
    if (folder / "ca.pem").exists() and (folder / "ca.pem").read_bytes() != ca_pem:
        raise ConfigError(f"{folder / 'ca.pem'} is another broker's CA: this host belongs to another "
                          "deployment; join with a credentials folder of its own "
                          "(TRAINMEDIC_CREDENTIALS_DIR)")
    signer, keys = token_key(parsed.secret), []
    for role in (role for role in parsed.roles if role in SIGNING_ROLES):
        keyring.ensure_key(keys_dir, now, role)
        own = keyring.load_signing(keys_dir, role)
        proof = own.private.sign(possession(signer.key_id, role, prefix))
        keys.append(RoleKey(role=role, key=public_key_model(own.private.public_key()),
                            proof=base64.b64encode(proof).decode("ascii")))
    body = signer.sign(HostJoin(ts=now, roles=parsed.roles, keys=tuple(keys), deployment=prefix))
    status, answer = request(host, parsed.port, "POST", "/host", encode(body), verifying(ca_pem), timeout_s)
    if status != 200:
        raise JoinRefused(f"the registrar at {host}:{parsed.port} refused this host (HTTP {status}): "
                          f"{said(answer)}")
    files = files_of(answer, role_files(parsed.roles))
    if files["ca.pem"] != ca_pem:
        raise JoinRefused("the registrar answered with a CA other than the one the token pins")
    write_folder(folder, files)  # first: what the registrar handed out (the token is spent) is kept
    try:
        synced = adopt(keys_dir, answer_of(answer), keyring.COORDINATOR in parsed.roles, now)
    except JoinRefused as err:
        log.warning("joined, but the registrar's keys were not taken: %s; run `trainmedic keys sync`", err)
        synced = Synced()
    return parsed.roles, synced


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("token", metavar="@TOKEN_FILE|-",
                        help="the token `trainmedic broker invite` printed: @FILE reads it from FILE, - from "
                             "stdin (the token itself works too, but stays in the process list)")
    parser.add_argument("--bootstrap", help="the broker, whose host runs the registrar (HOST:PORT; env "
                                            "TRAINMEDIC_KAFKA_BOOTSTRAP)")
    parser.add_argument("--keys-dir", type=Path, metavar="DIR",
                        help="the keys folder (default $TRAINMEDIC_HOME/keys)")


def run(args: argparse.Namespace) -> int:
    return run_command("join", _run, args)


def _run(args: argparse.Namespace) -> int:
    bootstrap = args.bootstrap or os.environ.get("TRAINMEDIC_KAFKA_BOOTSTRAP")
    if not bootstrap:
        raise ConfigError("--bootstrap HOST:PORT is needed: the broker, whose host runs the registrar")
    folder, keys_dir = credentials_dir(), args.keys_dir or keyring.default_dir()
    prefix = KafkaSettings.from_env(bootstrap=bootstrap).topic_prefix
    roles, synced = join(token_argument(args.token), bootstrap, folder=folder, keys_dir=keys_dir,
                         prefix=prefix, now=time.time())
    print(f"joined as a host of {' and '.join(roles)}: credentials in {folder}; keys trusted here: "
          f"{', '.join(synced.trusted) or 'none new'}.")
    if keyring.OPERATOR in roles or keyring.COORDINATOR in roles:
        print("Hosts that joined before this one learn its key by `trainmedic keys sync` there (the "
              "coordinators' hosts after an operator joined; every host after a coordinator joined).")
    return 0
