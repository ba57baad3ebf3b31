"""Keys on disk: one folder of Ed25519 key files (ID.pub, ID.key, keys.json), by default
$TRAINMEDIC_HOME/keys, each key with a role (docs/security.md, "Keys").
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
)

from trainmedic.bus.settings import home
from trainmedic.common.errors import ConfigError
from trainmedic.recovery.signing import KIND, SigningKey, TrustedKeys, generate, key_id_of

log = logging.getLogger(__name__)

MANIFEST = "keys.json"
LEGACY_ENV = ("TRAINMEDIC_CLUSTER_KEY_FILE", "TRAINMEDIC_CLUSTER_KEY")
COORDINATOR = "coordinator"
OPERATOR = "operator"
NODE = "node:"  # + the node's name
HOW_TO_CREATE = "run `trainmedic keys generate`"
_NODE_NAME = re.compile(r"[^\s/]{1,256}")


def node_role(node: str) -> str:
    """The role of the key that signs node `node`'s acks."""
    if not _NODE_NAME.fullmatch(node):
        raise ConfigError(f"{node!r} is not a node name")
    return NODE + node


def role_flag(role: str) -> str:
    """How `trainmedic keys` names `role`: no flag (coordinator), --role operator, --node NAME."""
    if role == COORDINATOR:
        return ""
    return "--role operator" if role == OPERATOR else f"--node {role.removeprefix(NODE)}"


def how_to_create(role: str) -> str:
    """The command that makes a key of `role`."""
    return HOW_TO_CREATE if role == COORDINATOR else f"run `trainmedic keys generate {role_flag(role)}`"


def default_dir(env: Mapping[str, str] = os.environ) -> Path:
    return home(env) / "keys"


@dataclass(frozen=True)
class KeyInfo:
    """One key of a folder, as `trainmedic keys list` shows it."""

    key_id: str
    kind: str
    role: str
    created: float | None  # None: a public key copied without its keys.json entry
    signing: bool
    private: bool


def refuse_legacy(env: Mapping[str, str] = os.environ) -> None:
    """HMAC cluster keys are gone: a variable still naming one is a configuration to fix, not ignore."""
    for name in LEGACY_ENV:
        if env.get(name):
            raise ConfigError(f"{name} is set, but commands are now signed with Ed25519 keys: unset it and "
                              f"{HOW_TO_CREATE} (docs/security.md)")


def generate_key(directory: Path, now: float, role: str = COORDINATOR) -> str:
    """A first key pair of `role` in `directory`, made its signing key. Refuses a role that has one."""
    if _signer(_manifest(directory), role):
        rotate = f"trainmedic keys rotate {role_flag(role)}".rstrip()
        raise ConfigError(f"{directory} already has a {role} signing key: `{rotate}` replaces it")
    return _write_pair(directory, now, role)


def rotate_key(directory: Path, now: float, role: str = COORDINATOR) -> tuple[str, str]:
    """A new signing key of `role`; the old one's private file is deleted, its public key stays
    trusted (until its ID.pub is removed), so what was signed in flight still verifies. Returns
    (old id, new id)."""
    old = _signer(_manifest(directory), role)
    if not old:
        raise ConfigError(f"{directory} has no {role} signing key to rotate: {how_to_create(role)}")
    new = _write_pair(directory, now, role)
    (directory / f"{old}.key").unlink(missing_ok=True)
    return old, new


def ensure_key(directory: Path, now: float, role: str = COORDINATOR) -> str | None:
    """The id of a key of `role` generated now if `directory` has no signing key of it yet; None if
    it has one."""
    return None if _signer(_manifest(directory), role) else _write_pair(directory, now, role)


def trust_key(directory: Path, public: Path, role: str, now: float) -> str:
    """Copy the public key file `public` into `directory`, trusted for `role` (an operator's, or a
    node's from that node's machine). Returns its id."""
    key = _load_public(public, None)
    key_id = key_id_of(key)
    manifest = _manifest(directory)
    known = _role(manifest, key_id) if (directory / f"{key_id}.pub").exists() else None
    if known is not None and known != role:
        raise ConfigError(f"key {key_id} is already trusted here as {known}: one key, one role")
    if role != COORDINATOR:
        manifest.setdefault("roles", {})[key_id] = role
    manifest.setdefault("created", {}).setdefault(key_id, now)
    directory.mkdir(parents=True, exist_ok=True)
    _save(directory, manifest)  # before the .pub: a verifier that sees the file knows its role
    if public.resolve() != (directory / f"{key_id}.pub").resolve():
        shutil.copyfile(public, directory / f"{key_id}.pub")
    return key_id


def list_keys(directory: Path) -> list[KeyInfo]:
    manifest = _manifest(directory)
    created = manifest.get("created", {})
    out = []
    for path in sorted(directory.glob("*.pub"), key=lambda p: (created.get(p.stem, 0), p.stem)):
        role = _role(manifest, path.stem)
        signing = path.stem == _signer(manifest, role)
        out.append(KeyInfo(path.stem, KIND, role, created.get(path.stem), signing,
                           (directory / f"{path.stem}.key").exists()))
    return out


def load_signing(directory: Path, role: str = COORDINATOR) -> SigningKey:
    """The signing key of `role`, or a ConfigError that says what to do."""
    key_id = _signer(_manifest(directory), role)
    if not key_id:
        what = {COORDINATOR: "command signing key", OPERATOR: "operator key"}.get(role, f"key of {role}")
        unsigned = {COORDINATOR: "send unsigned commands", OPERATOR: "publish it unsigned"}.get(
            role, "send unsigned acks")
        raise ConfigError(f"no {what} in {directory}: {how_to_create(role)} (or pass --insecure to "
                          f"{unsigned})")
    path = directory / f"{key_id}.key"
    try:
        private = load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path}: cannot load the signing key: {err}") from None
    if not isinstance(private, Ed25519PrivateKey) or key_id_of(private.public_key()) != key_id:
        raise ConfigError(f"{path}: not the Ed25519 private key of id {key_id}")
    return SigningKey(key_id, private)


def load_trusted(directory: Path) -> TrustedKeys:
    """The coordinator's public keys in `directory` (what an executor trusts); a ConfigError if none."""
    trusted = load_roles(directory).get(COORDINATOR)
    if trusted is None:
        raise ConfigError(f"no trusted command keys (*.pub) in {directory}: copy the coordinator's "
                          f"keys/*.pub there, or {HOW_TO_CREATE} on the coordinator's machine (or pass "
                          "--insecure to accept unsigned commands)")
    return trusted


def load_roles(directory: Path) -> dict[str, TrustedKeys]:
    """Every public key in `directory`, checked against its file name, by role."""
    manifest = _manifest(directory)
    by_role: dict[str, list[Ed25519PublicKey]] = {}
    for path in sorted(directory.glob("*.pub")):
        by_role.setdefault(_role(manifest, path.stem), []).append(_load_public(path, path.stem))
    return {role: TrustedKeys.of(*publics) for role, publics in by_role.items()}


Trust = TypeVar("Trust")


class KeyFolder(Generic[Trust]):
    """What a verifier trusts from a folder (`load` of it), loaded again when its ID.pub files or its
    manifest change: a key copied in for a rotation is trusted, one removed no longer is, without a
    restart."""

    def __init__(self, directory: Path, trusted: Trust,
                 load: Callable[[Path], Trust] = load_trusted) -> None:
        self._directory = directory
        self._trusted = trusted
        self._load = load
        self._seen: tuple | None = None  # the folder as `trusted` was loaded from it

    def trusted(self) -> Trust:
        seen = self._fingerprint()
        if self._seen is None:
            self._seen = seen
        elif seen != self._seen:
            try:
                self._trusted = self._load(self._directory)
            except ConfigError as err:  # a half-copied or emptied folder: keep what was trusted, try again
                log.error("keeping the trusted keys of %s: %s", self._directory, err)
            else:
                self._seen = seen
                log.info("trusted keys of %s loaded again: %s", self._directory, self._trusted)
        return self._trusted

    def _fingerprint(self) -> tuple:
        try:
            manifest = (self._directory / MANIFEST).stat().st_mtime_ns
        except OSError:
            manifest = None
        return frozenset(path.name for path in self._directory.glob("*.pub")), manifest


def _write_pair(directory: Path, now: float, role: str) -> str:
    key = generate()
    directory.mkdir(parents=True, exist_ok=True)
    private = key.private.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    fd = os.open(directory / f"{key.key_id}.key", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(private)
    manifest = _manifest(directory)
    if role == COORDINATOR:
        manifest["signing"] = key.key_id
    else:
        manifest.setdefault("signers", {})[role] = key.key_id
        manifest.setdefault("roles", {})[key.key_id] = role
    manifest.setdefault("created", {})[key.key_id] = now
    _save(directory, manifest)  # before the .pub: a verifier that sees the file knows its role
    public = key.private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    (directory / f"{key.key_id}.pub").write_bytes(public)
    return key.key_id


def _save(directory: Path, manifest: dict) -> None:
    tmp = directory / f".{MANIFEST}.tmp"
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
        os.fchmod(out.fileno(), 0o600)  # its owner's only, as the keys are
        out.write(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    tmp.replace(directory / MANIFEST)


def _signer(manifest: dict, role: str) -> str | None:
    if role == COORDINATOR:
        return manifest.get("signing")
    return manifest.get("signers", {}).get(role)


def _role(manifest: dict, key_id: str) -> str:
    """The role keys.json's `roles` gives `key_id`. A key it does not name is a coordinator key:
    every key of a folder written before roles, and an ID.pub copied in by hand."""
    return manifest.get("roles", {}).get(key_id, COORDINATOR)


def _load_public(path: Path, key_id: str | None) -> Ed25519PublicKey:
    """The Ed25519 public key in `path`, which must be that of `key_id` when one is given."""
    try:
        public = load_pem_public_key(path.read_bytes())
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path}: cannot load the public key: {err}") from None
    if not isinstance(public, Ed25519PublicKey):
        raise ConfigError(f"{path}: not an Ed25519 public key")
    if key_id is not None and key_id_of(public) != key_id:
        raise ConfigError(f"{path}: not the Ed25519 public key of id {key_id}")
    return public


def _manifest(directory: Path) -> dict:
    path = directory / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path}: unreadable ({err}); it names the signing keys and their roles") from None
    if not isinstance(manifest, dict):
        raise ConfigError(f"{path}: not a JSON object")
    return manifest
