"""What joining hosts say to the broker's registrar (trainmedic/local/registrar.py), over HTTPS: the CA
fetched once and kept only if the join token pins it (`fetch_ca`), every later request verified against
that CA; the answers' files written 0600 in a 0700 folder, and the keys they carry trusted for their roles.
A node's join (trainmedic/node_join.py), a control-plane host's (trainmedic/host_join.py) and `trainmedic
keys sync` use it.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import json
import logging
import os
import ssl
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from pydantic import ValidationError

from trainmedic.bus.addresses import split_host_port
from trainmedic.common.errors import ConfigError, TrainmedicError
from trainmedic.recovery import key_manifest, keyring
from trainmedic.recovery.join_token import MAX_TOKEN, SIGNING_ROLES, JoinToken, ca_pin, public_of
from trainmedic.schemas import PublicKey, RoleKey

log = logging.getLogger("trainmedic.join")


MAX_ANSWER = 1024 * 1024  # bytes read of one answer of the registrar
TIMEOUT_S = 30.0
MAX_KEYS = 4096  # keys and revoked ids a directory answer may hold


class JoinRefused(TrainmedicError):
    """The registrar, or the broker it stands for, would not let this host join (or answered what this
    host cannot take): no credentials were written (a key pair made for the join stays)."""


def fetch_ca(host: str, token: JoinToken, timeout_s: float = TIMEOUT_S) -> bytes:
    """The CA the registrar serves, fetched without verification, and kept only if the token pins it."""
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    status, ca_pem = request(host, token.port, "GET", "/ca", None, unverified, timeout_s)
    if status != 200:
        raise JoinRefused(f"the registrar at {host}:{token.port} did not give its CA (HTTP {status})")
    if ca_pin(ca_pem) != token.ca_sha256:
        raise JoinRefused(f"the CA served at {host}:{token.port} (SHA-256 {ca_pin(ca_pem)}) is not the one "
                          f"the token pins ({token.ca_sha256}): a man in the middle, or another broker than "
                          "the operator's (check --bootstrap); nothing was sent")
    return ca_pem


def verifying(ca_pem: bytes) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cadata=ca_pem.decode("ascii"))
    except (ssl.SSLError, ValueError) as err:
        raise JoinRefused(f"the pinned CA is no PEM certificate: {err}") from None


def request(host: str, port: int, method: str, path: str, body: bytes | None, context: ssl.SSLContext,
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


def said(answer: bytes) -> str:
    try:
        return str(json.loads(answer)["error"])
    except (ValueError, KeyError, TypeError, RecursionError):
        return answer[:300].decode("utf-8", "replace")


def answer_of(answer: bytes) -> dict:
    try:
        found = json.loads(answer)
    except (ValueError, RecursionError):  # a deep nest of brackets too
        found = None
    if not isinstance(found, dict):
        raise JoinRefused("the registrar's answer is no JSON object")
    return found


def files_of(answer: bytes, names: tuple[str, ...]) -> dict[str, bytes]:
    """The files the answer carries (base64), when they are exactly `names`."""
    files = answer_of(answer).get("files")
    if not isinstance(files, dict) or set(files) != set(names):
        raise JoinRefused(f"the registrar's answer holds not the files asked for ({', '.join(names)})")
    try:
        return {name: base64.b64decode(str(data), validate=True) for name, data in files.items()}
    except (binascii.Error, ValueError):
        raise JoinRefused("the registrar's answer holds files that are not base64") from None


def trust(keys_dir: Path, key: PublicKey, role: str, now: float) -> str:
    """`key`, as the registrar answered it, trusted in `keys_dir` for `role`."""
    try:
        return keyring.trust_public(keys_dir, public_of(key), role, now)
    except ValueError as err:
        raise JoinRefused(f"the registrar's answer: {err}") from None


def write_folder(folder: Path, files: Mapping[str, bytes]) -> None:
    """A credentials folder: mode 0700, each file 0600, each replaced whole. A folder that is a link,
    or another user's, is refused; no file is written through a link."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if folder.is_symlink() or folder.stat().st_uid != os.geteuid():
        raise ConfigError(f"{folder} is a link, or another user's: the credentials go into a folder of this "
                          "user's own (TRAINMEDIC_CREDENTIALS_DIR)")
    folder.chmod(0o700)
    for name, data in files.items():
        tmp = folder / f".{name}.tmp"
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), 0o600)
            out.write(data)
        tmp.replace(folder / name)


def token_argument(value: str, stdin: TextIO = sys.stdin) -> str:
    """The token an argument names: `@PATH` the file's first line, `-` a line of stdin, else the value
    itself (said in a WARNING: it stays visible in the process list while the process runs)."""
    if value == "-":
        return stdin.readline(MAX_TOKEN + 2).strip()
    if value.startswith("@"):
        try:
            with open(value[1:], encoding="utf-8", errors="replace") as file:
                return file.readline(MAX_TOKEN + 2).strip()
        except OSError as err:
            raise ConfigError(f"{value}: cannot read the token file: {err.strerror or err}") from None
    log.warning("the join token given on the command line stays visible in the process list "
                "(/proc/PID/cmdline) and in the shell's history while this process runs: pass @FILE (a "
                "file only you can read, deleted once joined) or - (the token on stdin) instead")
    return value


@dataclass(frozen=True)
class Synced:
    """What a key directory changed here: the ids trusted anew, revoked, and passed over (with why)."""

    trusted: tuple[str, ...] = ()
    revoked: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()


def sync(bootstrap: str, port: int, ca_pem: bytes, keys_dir: Path, now: float,
         timeout_s: float = TIMEOUT_S) -> Synced:
    """`trainmedic keys sync`: the broker host's key directory adopted here (`adopt`); the operators'
    keys only on a host that signs as coordinator."""
    host = first_host(bootstrap)
    status, answer = request(host, port, "GET", "/keys", None, verifying(ca_pem), timeout_s)
    if status != 200:
        raise JoinRefused(f"the registrar at {host}:{port} gave no keys (HTTP {status}): {said(answer)}")
    coordinator = bool(key_manifest.signer(key_manifest.read(keys_dir), keyring.COORDINATOR))
    return adopt(keys_dir, answer_of(answer), coordinator, now)


def adopt(keys_dir: Path, directory: dict, operators: bool, now: float) -> Synced:
    """Trust here the directory's coordinator keys (and its operator keys when `operators`), each for
    its role, and revoke here the ids it revoked. A key revoked here, or trusted here for another role,
    is passed over with a WARNING; this host's own signing key is never revoked by it (said instead)."""
    entries, revoked = directory.get("keys"), directory.get("revoked")
    if (not isinstance(entries, list) or not isinstance(revoked, list)
            or len(entries) + len(revoked) > MAX_KEYS):
        raise JoinRefused(f"the registrar's answer holds no key directory (at most {MAX_KEYS} keys)")
    try:
        keys = [RoleKey.model_validate(entry) for entry in entries]
    except ValidationError as err:
        raise JoinRefused(f"the registrar's answer holds a key that is none: {err}") from None
    before = {key_id for trusted in keyring.load_roles(keys_dir).values() for key_id in trusted.keys}
    added, skipped = [], []
    for key in keys:
        if key.role == keyring.OPERATOR and not operators or key.key.key_id in before:
            continue
        try:
            added.append(trust(keys_dir, key.key, key.role, now))
        except ConfigError as err:
            log.warning("key %s (%s) of the registrar's directory not trusted here: %s", key.key.key_id,
                        key.role, err)
            skipped.append(key.key.key_id)
    manifest = key_manifest.read(keys_dir)
    own = {key_manifest.signer(manifest, role) for role in (*SIGNING_ROLES, *manifest.get("signers", {}))}
    gone = []
    for key_id in (str(item) for item in revoked if str(item) in before):
        if key_id in own:
            log.warning("the broker's host revoked key %s, this host's own signing key: `trainmedic keys "
                        "rotate` here, then have the new key trusted (`trainmedic broker invite` anew)",
                        key_id)
            skipped.append(key_id)
            continue
        try:
            gone.append(keyring.revoke_key(keys_dir, key_id, now).key_id)
        except ConfigError as err:
            log.warning("key %s, revoked on the broker's host, not revoked here: %s", key_id, err)
            skipped.append(key_id)
    return Synced(tuple(added), tuple(gone), tuple(skipped))


def first_host(bootstrap: str) -> str:
    """The host of the first --bootstrap address: the broker's host, where the registrar runs."""
    return split_host_port(bootstrap.split(",")[0].strip(), "--bootstrap")[0]
