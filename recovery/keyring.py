"""Command keys on disk: one folder of Ed25519 key files, by default $TRAINMEDIC_HOME/keys.

    ID.pub      a public key (PEM); every one in the folder is trusted
    ID.key      a private key (PEM, mode 0600); only on the coordinator's machine
    keys.json   {"signing": ID, "created": {ID: unix_s}}: which key signs, when each was made

The coordinator signs with the key `keys.json` names and trusts every ID.pub (to check the
commands it reads back). An executor needs only the ID.pub files: copy them to its folder.
Rotation writes a new pair, makes it the signing key and deletes the old private key; the old
public key stays trusted until its ID.pub is removed, so commands in flight still verify.
A running executor notices ID.pub files added or removed (`KeyFolder`), so neither needs a
restart there.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
)

from bus.errors import ConfigError
from bus.settings import home
from recovery.signing import KIND, SigningKey, TrustedKeys, generate, key_id_of

log = logging.getLogger(__name__)

MANIFEST = "keys.json"
LEGACY_ENV = ("TRAINMEDIC_CLUSTER_KEY_FILE", "TRAINMEDIC_CLUSTER_KEY")
HOW_TO_CREATE = "run `trainmedic keys generate`"


def default_dir(env: Mapping[str, str] = os.environ) -> Path:
    return home(env) / "keys"


@dataclass(frozen=True)
class KeyInfo:
    """One key of a folder, as `trainmedic keys list` shows it."""

    key_id: str
    kind: str
    created: float | None  # None: a public key copied without its keys.json entry
    signing: bool
    private: bool


def refuse_legacy(env: Mapping[str, str] = os.environ) -> None:
    """HMAC cluster keys are gone: a variable still naming one is a configuration to fix, not ignore."""
    for name in LEGACY_ENV:
        if env.get(name):
            raise ConfigError(f"{name} is set, but commands are now signed with Ed25519 keys: unset it and "
                              f"{HOW_TO_CREATE} (docs/security.md)")


def generate_key(directory: Path, now: float) -> str:
    """A first key pair in `directory`, made the signing key. Refuses a folder that has one."""
    if _manifest(directory).get("signing"):
        raise ConfigError(f"{directory} already has a signing key: `trainmedic keys rotate` replaces it")
    return _write_pair(directory, now)


def rotate_key(directory: Path, now: float) -> tuple[str, str]:
    """A new signing key; the old one's private file is deleted, its public key stays trusted.
    Returns (old id, new id)."""
    old = _manifest(directory).get("signing")
    if not old:
        raise ConfigError(f"{directory} has no signing key to rotate: {HOW_TO_CREATE}")
    new = _write_pair(directory, now)
    (directory / f"{old}.key").unlink(missing_ok=True)
    return old, new


def ensure_key(directory: Path, now: float) -> str | None:
    """The id of a key generated now if `directory` has no signing key yet; None if it has one."""
    return None if _manifest(directory).get("signing") else _write_pair(directory, now)


def list_keys(directory: Path) -> list[KeyInfo]:
    manifest = _manifest(directory)
    created = manifest.get("created", {})
    return [KeyInfo(path.stem, KIND, created.get(path.stem), path.stem == manifest.get("signing"),
                    (directory / f"{path.stem}.key").exists())
            for path in sorted(directory.glob("*.pub"), key=lambda p: (created.get(p.stem, 0), p.stem))]


def load_signing(directory: Path) -> SigningKey:
    """The coordinator's signing key, or a ConfigError that says what to do."""
    key_id = _manifest(directory).get("signing")
    if not key_id:
        raise ConfigError(f"no command signing key in {directory}: {HOW_TO_CREATE} (or pass --insecure "
                          "to send unsigned commands)")
    path = directory / f"{key_id}.key"
    try:
        private = load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path}: cannot load the signing key: {err}") from None
    if not isinstance(private, Ed25519PrivateKey) or key_id_of(private.public_key()) != key_id:
        raise ConfigError(f"{path}: not the Ed25519 private key of id {key_id}")
    return SigningKey(key_id, private)


def load_trusted(directory: Path) -> TrustedKeys:
    """Every public key in `directory`, checked against its file name; a ConfigError if none."""
    publics: list[Ed25519PublicKey] = []
    for path in sorted(directory.glob("*.pub")):
        try:
            public = load_pem_public_key(path.read_bytes())
        except (OSError, ValueError) as err:
            raise ConfigError(f"{path}: cannot load the public key: {err}") from None
        if not isinstance(public, Ed25519PublicKey) or key_id_of(public) != path.stem:
            raise ConfigError(f"{path}: not the Ed25519 public key of id {path.stem}")
        publics.append(public)
    if not publics:
        raise ConfigError(f"no trusted command keys (*.pub) in {directory}: copy the coordinator's "
                          f"keys/*.pub there, or {HOW_TO_CREATE} on the coordinator's machine (or pass "
                          "--insecure to accept unsigned commands)")
    return TrustedKeys.of(*publics)


class KeyFolder:
    """The trusted keys of a folder, loaded again when its set of ID.pub files changes: an executor
    picks up a key copied in for a rotation, or stops trusting one removed, without a restart."""

    def __init__(self, directory: Path, trusted: TrustedKeys) -> None:
        self._directory = directory
        self._trusted = trusted
        self._names: frozenset[str] | None = None  # the ID.pub files `trusted` was loaded from

    def trusted(self) -> TrustedKeys:
        names = frozenset(path.name for path in self._directory.glob("*.pub"))
        if self._names is None:
            self._names = names
        elif names != self._names:
            try:
                self._trusted = load_trusted(self._directory)
            except ConfigError as err:  # a half-copied or emptied folder: keep what was trusted, try again
                log.error("keeping the trusted command keys %s: %s", ", ".join(sorted(self._trusted.keys)),
                          err)
            else:
                self._names = names
                log.info("trusted command keys now: %s", ", ".join(sorted(self._trusted.keys)))
        return self._trusted


def _write_pair(directory: Path, now: float) -> str:
    key = generate()
    directory.mkdir(parents=True, exist_ok=True)
    private = key.private.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    fd = os.open(directory / f"{key.key_id}.key", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(private)
    public = key.private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    (directory / f"{key.key_id}.pub").write_bytes(public)
    manifest = _manifest(directory)
    manifest["signing"] = key.key_id
    manifest.setdefault("created", {})[key.key_id] = now
    tmp = directory / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    tmp.replace(directory / MANIFEST)
    return key.key_id


def _manifest(directory: Path) -> dict:
    path = directory / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path}: unreadable ({err}); it names the signing key") from None
    if not isinstance(manifest, dict):
        raise ConfigError(f"{path}: not a JSON object")
    return manifest
