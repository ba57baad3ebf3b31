"""Keys on disk: one folder of Ed25519 key files (ID.pub, ID.key, keys.json), by default
$TRAINMEDIC_HOME/keys. A public key is trusted only for the role keys.json gives it; one with no role
(an ID.pub copied in by hand) or revoked here is trusted for nothing (docs/security.md, "Keys").
"""

from __future__ import annotations

import logging
import os
import re
import time
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

from trainmedic.bus.settings import home
from trainmedic.common.errors import ConfigError
from trainmedic.recovery import key_manifest
from trainmedic.recovery.key_manifest import (
    COORDINATOR,
    MANIFEST,
    NODE,
    OPERATOR,
    role_of,
    save,
    signer,
    warn_once,
    writing,
)
from trainmedic.recovery.signing import KIND, SigningKey, TrustedKeys, generate, key_id_of

log = logging.getLogger(__name__)

LEGACY_ENV = ("TRAINMEDIC_CLUSTER_KEY_FILE", "TRAINMEDIC_CLUSTER_KEY")
HOW_TO_CREATE = "run `trainmedic keys generate`"
_NODE_NAME = re.compile(r"[^\s/]{1,256}")
_KEY_ID = re.compile(r"[0-9a-f]{16}")


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
    role: str | None  # None: an ID.pub with no role here, trusted for nothing
    created: float | None  # None: a public key copied without its keys.json entry
    signing: bool
    private: bool
    revoked: float | None = None  # when it was revoked here


@dataclass(frozen=True)
class Revoked:
    """A key revoked here: `role` None for an ID.pub that had none; `private_deleted` whether its
    private key was here (and is gone)."""

    key_id: str
    role: str | None
    at: float
    private_deleted: bool


def refuse_legacy(env: Mapping[str, str] = os.environ) -> None:
    """HMAC cluster keys are gone: a variable still naming one is a configuration to fix, not ignore."""
    for name in LEGACY_ENV:
        if env.get(name):
            raise ConfigError(f"{name} is set, but commands are now signed with Ed25519 keys: unset it and "
                              f"{HOW_TO_CREATE} (docs/security.md)")


def generate_key(directory: Path, now: float, role: str = COORDINATOR) -> str:
    """A first key pair of `role` in `directory`, made its signing key. Refuses a role that has one."""
    with writing(directory) as manifest:
        if signer(manifest, role):
            rotate = f"trainmedic keys rotate {role_flag(role)}".rstrip()
            raise ConfigError(f"{directory} already has a {role} signing key: `{rotate}` replaces it")
        return _write_pair(directory, manifest, now, role)


def rotate_key(directory: Path, now: float, role: str = COORDINATOR,
               expected: str | None = None) -> tuple[str, str]:
    """A new signing key of `role`: its `next_key` if one waits, else one made now; the old one's
    private file is deleted, its public key stays trusted (until it is revoked), so what was signed in
    flight still verifies. With `expected`, refused unless that is still the role's signing key (a
    rotation ran meanwhile). Returns (old id, new id)."""
    with writing(directory) as manifest:
        old = signer(manifest, role)
        if not old:
            raise ConfigError(f"{directory} has no {role} signing key to rotate: {how_to_create(role)}")
        if expected is not None and old != expected:
            raise ConfigError(f"the {role} signing key of {directory} is {old}, not {expected}: another "
                              "rotation ran meanwhile")
        waiting = manifest.get("next", {}).pop(role, None)
        if waiting is None:
            new = _write_pair(directory, manifest, now, role)
        else:
            key_manifest.set_signer(manifest, role, waiting)
            save(directory, manifest)
            new = waiting
    (directory / f"{old}.key").unlink(missing_ok=True)
    return old, new


def next_key(directory: Path, now: float, role: str) -> SigningKey:
    """The key `rotate_key` will make `role`'s signing key: one made now, or the one made for an
    earlier try whose rotation did not happen (a node announces the same key again)."""
    with writing(directory) as manifest:
        waiting = manifest.get("next", {}).get(role)
        if waiting is None:
            waiting = _write_pair(directory, manifest, now, role, sign=False)
    return SigningKey.of(_load_private(directory / f"{waiting}.key"))


def ensure_key(directory: Path, now: float, role: str = COORDINATOR) -> str | None:
    """The id of a key of `role` generated now if `directory` has no signing key of it yet; None if
    it has one."""
    if signer(key_manifest.read(directory), role):  # no lock (nor a writable folder) needed then
        return None
    with writing(directory) as manifest:
        return None if signer(manifest, role) else _write_pair(directory, manifest, now, role)


def trust_key(directory: Path, public: Path, role: str, now: float) -> str:
    """Copy the public key file `public` into `directory`, trusted for `role` (the coordinator's on an
    executor's machine, an operator's or a node's on the coordinator's). Returns its id. A key revoked
    here, or trusted here for another role, is refused."""
    return trust_public(directory, _load_public(public, None), role, now)


def trust_public(directory: Path, key: Ed25519PublicKey, role: str, now: float) -> str:
    """`trust_key` of a key in hand (one the registrar answered with): its ID.pub written here."""
    key_id = key_id_of(key)
    with writing(directory) as manifest:
        gone = key_manifest.revoked(manifest).get(key_id)
        if gone is not None:
            raise ConfigError(f"key {key_id} was revoked here ({utc(gone['at'])} UTC): a revoked key is "
                              f"never trusted again; trust a new key of the role instead")
        known = role_of(manifest, key_id)
        if known is not None and known != role:
            raise ConfigError(f"key {key_id} is already trusted here as {known}: one key, one role")
        manifest.setdefault("roles", {})[key_id] = role
        manifest.setdefault("created", {}).setdefault(key_id, now)
        save(directory, manifest)  # before the .pub: a verifier that sees the file knows its role
        path = directory / f"{key_id}.pub"
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(key.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
        tmp.replace(path)
    return key_id


def revoke_key(directory: Path, key_id: str, now: float, force: bool = False) -> Revoked:
    """Trust `key_id` no more here, for good: recorded in keys.json as revoked (id, role, when), so
    its ID.pub copied in again is still refused; its ID.pub and, if here, ID.key deleted. The
    signing key of a role needs `force`: the role is then left with no key to sign with. Revoking a
    key revoked before changes nothing but deleting its files again."""
    if not _KEY_ID.fullmatch(key_id):
        raise ConfigError(f"{key_id!r} is not a key id (16 hex digits, as `trainmedic keys list` shows them)")
    public, private = directory / f"{key_id}.pub", directory / f"{key_id}.key"
    if not directory.is_dir():
        raise ConfigError(f"no key {key_id} in {directory} (`trainmedic keys list` shows its keys)")
    with writing(directory) as manifest:
        record = key_manifest.revoked(manifest).get(key_id)
        had_private = private.exists()
        if record is None:
            role = role_of(manifest, key_id)
            if role is None and not public.exists() and not had_private:
                raise ConfigError(f"no key {key_id} in {directory} (`trainmedic keys list` shows its keys)")
            signs = [r for r in (COORDINATOR, *manifest.get("signers", {})) if signer(manifest, r) == key_id]
            if signs and not force:
                flag = f" {role_flag(signs[0])}".rstrip()
                raise ConfigError(
                    f"key {key_id} is the {signs[0]} signing key of {directory}: revoked, its role has no "
                    f"key to sign with, and what it signs is refused wherever the revocation is made. To "
                    f"retire it, `trainmedic keys rotate{flag}` first, then revoke it; if it was stolen, "
                    f"pass --force, then `trainmedic keys generate{flag}`")
            for role_signed in signs:
                key_manifest.set_signer(manifest, role_signed, None)
            manifest.get("roles", {}).pop(key_id, None)
            waiting = manifest.get("next", {})  # a key made for a rotation, revoked: never made a signer
            for role_next in [r for r, k in waiting.items() if k == key_id]:
                del waiting[role_next]
            record = manifest.setdefault("revoked", {})[key_id] = {"role": role, "at": now}
            save(directory, manifest)  # before the files go: a verifier reloading sees it revoked
        private.unlink(missing_ok=True)
        public.unlink(missing_ok=True)
    return Revoked(key_id, record["role"], record["at"], had_private)


def list_keys(directory: Path) -> list[KeyInfo]:
    """Every key of the folder: its ID.pub files (trusted, role-less, or revoked and copied in again)
    and the keys revoked here, oldest first."""
    manifest = key_manifest.read(directory)
    created, revoked = manifest.get("created", {}), key_manifest.revoked(manifest)
    ids = {path.stem for path in directory.glob("*.pub")} | set(revoked)
    out = []
    for key_id in sorted(ids, key=lambda k: (created.get(k, 0), k)):
        gone = revoked.get(key_id)
        role = gone["role"] if gone else role_of(manifest, key_id)
        out.append(KeyInfo(key_id, KIND, role, created.get(key_id), role is not None and not gone
                           and key_id == signer(manifest, role), (directory / f"{key_id}.key").exists(),
                           gone["at"] if gone else None))
    return out


def load_signing(directory: Path, role: str = COORDINATOR) -> SigningKey:
    """The signing key of `role`, or a ConfigError that says what to do."""
    key_id = signer(key_manifest.read(directory), role)
    if not key_id:
        what = {COORDINATOR: "command signing key", OPERATOR: "operator key"}.get(role, f"key of {role}")
        unsigned = {COORDINATOR: "send unsigned commands", OPERATOR: "publish it unsigned"}.get(
            role, "send unsigned acks")
        raise ConfigError(f"no {what} in {directory}: {how_to_create(role)} (or pass --insecure to "
                          f"{unsigned})")
    return SigningKey(key_id, _load_private(directory / f"{key_id}.key"))


def _load_private(path: Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in `path` (named ID.key), checked against its id."""
    try:
        private = load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path}: cannot load the signing key: {err}") from None
    if not isinstance(private, Ed25519PrivateKey) or key_id_of(private.public_key()) != path.stem:
        raise ConfigError(f"{path}: not the Ed25519 private key of id {path.stem}")
    return private


def load_trusted(directory: Path) -> TrustedKeys:
    """The coordinator's public keys in `directory` (what an executor trusts at start); a ConfigError
    if none."""
    trusted = coordinator_keys(directory)
    if not trusted.keys:
        raise ConfigError(f"no trusted command keys (*.pub) in {directory}: trust the coordinator's public "
                          f"key there with `trainmedic keys trust ID.pub --role coordinator`, or "
                          f"{HOW_TO_CREATE} on the coordinator's machine (or pass --insecure to accept "
                          "unsigned commands)")
    return trusted


def reload_trusted(directory: Path) -> TrustedKeys:
    """The coordinator's public keys in `directory` as a running executor loads them again (KeyFolder):
    none, when the last one was revoked or removed, is no error (which would keep it trusted) but an
    ERROR in the log, and every command is refused until a coordinator key is trusted again."""
    trusted = coordinator_keys(directory)
    if not trusted.keys:
        log.error("no trusted command keys left in %s: every command is refused until the coordinator's "
                  "public key is trusted there (`trainmedic keys trust ID.pub --role coordinator`)",
                  directory)
    return trusted


def coordinator_keys(directory: Path) -> TrustedKeys:
    """The coordinator's public keys in `directory`, maybe none; with the ids revoked there."""
    roles, revoked = _roles(directory)
    return roles.get(COORDINATOR, TrustedKeys({}, revoked))


def load_roles(directory: Path) -> dict[str, TrustedKeys]:
    """Every public key in `directory` with a role, checked against its file name, by role; each
    carries the ids revoked here (so that a record they signed is refused as revoked), and a role
    whose keys were all revoked is there with none. An ID.pub with no role, or of a revoked key, is
    trusted for nothing, and named once in a WARNING."""
    return _roles(directory)[0]


def _roles(directory: Path) -> tuple[dict[str, TrustedKeys], frozenset[str]]:
    manifest = key_manifest.read(directory)
    revoked = key_manifest.revoked(manifest)
    by_role: dict[str, list[Ed25519PublicKey]] = {r["role"]: [] for r in revoked.values() if r["role"]}
    for path in sorted(directory.glob("*.pub")):
        role = role_of(manifest, path.stem)
        if path.stem in revoked:
            warn_once(directory, path.stem, "revoked", "key %s (%s) was revoked here at %s UTC: it is "
                      "trusted for nothing; delete the file", path.stem, path, utc(revoked[path.stem]["at"]),
                      logger=log)
        elif role is None:
            warn_once(directory, path.stem, "no role", "key %s (%s) has no role in %s, so it is trusted "
                      "for nothing: if it is the coordinator's, run `trainmedic keys trust %s --role "
                      "coordinator --keys-dir %s` (or --role operator, --node NAME: the role it was made "
                      "for)",
                      path.stem, path, MANIFEST, path, directory, logger=log)
        else:
            by_role.setdefault(role, []).append(_load_public(path, path.stem))
    ids = frozenset(revoked)
    return {role: TrustedKeys({key_id_of(p): p for p in publics}, revoked=ids)
            for role, publics in by_role.items()}, ids


def _write_pair(directory: Path, manifest: dict, now: float, role: str, sign: bool = True) -> str:
    """A new key pair of `role`, its signing key (`sign`) or its next one (`next_key`); `manifest` is
    the folder's, read under its lock."""
    key = generate()
    private = key.private.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    fd = os.open(directory / f"{key.key_id}.key", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(private)
    if sign:
        key_manifest.set_signer(manifest, role, key.key_id)
    else:
        manifest.setdefault("next", {})[role] = key.key_id
    manifest.setdefault("roles", {})[key.key_id] = role
    manifest.setdefault("created", {})[key.key_id] = now
    save(directory, manifest)  # before the .pub: a verifier that sees the file knows its role
    public = key.private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    (directory / f"{key.key_id}.pub").write_bytes(public)
    return key.key_id


def utc(at: float) -> str:
    """`at` (seconds since the epoch) as `trainmedic keys` shows a time: YYYY-MM-DD HH:MM:SS, in UTC."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))


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
