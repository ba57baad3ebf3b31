"""keys.json, the manifest of a keys folder: which key signs for each role, the role every trusted
key was given, the keys revoked here, and when each was made or trusted (docs/security.md, "Keys").

Version 2 names every trusted key's role. A manifest without a version (written before roles, when
a key it did not name was a coordinator key) is migrated once, when first read: see `migrate`.

Every change is a read-modify-write made under the folder's lock (`writing`), so that two writers
(`trainmedic keys revoke` and an executor migrating the folder at its first read) never undo each
other; readers take no lock, each write being an atomic rename.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from trainmedic.common.errors import ConfigError

log = logging.getLogger(__name__)

MANIFEST = "keys.json"
LOCK = ".keys.lock"  # held (flock) by whoever changes keys.json, for the time of its read-modify-write
VERSION = 2
COORDINATOR = "coordinator"
OPERATOR = "operator"
NODE = "node:"  # + the node's name

# What was named in a WARNING or ERROR already, by (folder, key id or file, why): a verifier reads its
# folder at every change, and the same ignored key or unwritable migration is named once a process.
# Module-wide because the loaders that warn are plain functions, called at start and by every
# KeyFolder's reloads, and "once a process" has to span them all.
_warned: set[tuple[Path, str, str]] = set()


def read(directory: Path) -> dict:
    """The manifest of `directory` at VERSION ({} when there is none), migrated first if it predates
    roles."""
    manifest = _load(directory)
    if not manifest or manifest.get("version") is not None:
        return _checked(directory, manifest)
    try:
        with locked(directory):
            return _current(directory)  # read again under the lock: another writer may have changed it
    except OSError as err:  # no lock file can be made (a read-only folder): migrated in memory only
        warn_once(directory, MANIFEST, "unwritable", "cannot write the migrated %s: %s; it is migrated "
                  "again at each read, until its folder is writable", directory / MANIFEST, err,
                  level=logging.ERROR)
        return migrate(directory, manifest, write=False)


@contextmanager
def writing(directory: Path) -> Iterator[dict]:
    """The manifest of `directory` (migrated if it predates roles), read under the folder's lock,
    which is held until the block ends: a change is `save`d inside the block."""
    with locked(directory):
        yield _current(directory)


@contextmanager
def locked(directory: Path, name: str = LOCK) -> Iterator[None]:
    """Hold the folder's lock (an exclusive flock on its file `name`, made if need be)."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / name, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def migrate(directory: Path, old: dict, write: bool = True) -> dict:
    """A manifest written before roles, at VERSION, written back atomically (once; the caller holds
    the folder's lock). Its coordinator keys were implicit; only those keys.json itself records stay
    coordinator keys: its signing key and every key it lists under `created` with no role (only
    `trainmedic keys generate`, `rotate` or `trust --role coordinator` recorded those). An ID.pub it
    does not name (copied in by hand: maybe a node's key by mistake) gets no role, so it is trusted for
    nothing. A WARNING names each key given a role, once a process."""
    roles = dict(old.get("roles", {}))
    recorded = [old["signing"]] if old.get("signing") else []
    recorded += [key_id for key_id in old.get("created", {})
                 if key_id not in recorded and (directory / f"{key_id}.pub").exists()]
    given = [key_id for key_id in recorded if key_id not in roles]
    roles.update(dict.fromkeys(given, COORDINATOR))
    new = {**old, "version": VERSION, "roles": roles}
    if write:
        try:
            save(directory, new)
        except OSError as err:  # a read-only keys.json: trust as migrated, and try again at the next read
            warn_once(directory, MANIFEST, "unwritable", "cannot write the migrated %s: %s; it is migrated "
                      "again at each read, until it is writable", directory / MANIFEST, err,
                      level=logging.ERROR)
    for key_id in given:
        how = "its signing key" if key_id == old.get("signing") else "recorded there by `trainmedic keys`"
        warn_once(directory, key_id, "migrated", "%s was written before keys had roles, and is migrated: "
                  "key %s (%s) is given role coordinator (%s)", directory / MANIFEST, key_id,
                  directory / f"{key_id}.pub", how)
    return new


def save(directory: Path, manifest: dict) -> None:
    """Write `manifest` (at VERSION) atomically, readable by its owner only, as the keys are. A change
    of what was read is made under the lock: see `writing`."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{MANIFEST}.{os.getpid()}.tmp"
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
        os.fchmod(out.fileno(), 0o600)
        out.write(json.dumps({**manifest, "version": VERSION}, indent=2, sort_keys=True) + "\n")
    tmp.replace(directory / MANIFEST)


def signer(manifest: dict, role: str) -> str | None:
    """The id of the key that signs for `role` here, if any."""
    if role == COORDINATOR:
        return manifest.get("signing")
    return manifest.get("signers", {}).get(role)


def set_signer(manifest: dict, role: str, key_id: str | None) -> None:
    """Make `key_id` the key that signs for `role` here (None: no key does)."""
    signers = manifest if role == COORDINATOR else manifest.setdefault("signers", {})
    name = "signing" if role == COORDINATOR else role
    if key_id is None:
        signers.pop(name, None)
    else:
        signers[name] = key_id


def role_of(manifest: dict, key_id: str) -> str | None:
    """The role `key_id` was trusted for here; None when it has none (never trusted for anything)."""
    return manifest.get("roles", {}).get(key_id)


def revoked(manifest: dict) -> dict[str, dict]:
    """The keys revoked here: id -> {"role": its role or None, "at": when}."""
    return manifest.get("revoked", {})


def warn_once(directory: Path, key: str, why: str, message: str, *args: object,
              level: int = logging.WARNING, logger: logging.Logger = log) -> None:
    """Log `message` unless one was logged already for (`directory`, `key`, `why`) in this process."""
    if (directory, key, why) not in _warned:
        _warned.add((directory, key, why))
        logger.log(level, message, *args)


def _current(directory: Path) -> dict:
    """The manifest, migrated and written back if it predates roles; the caller holds the lock."""
    manifest = _load(directory)
    if manifest and manifest.get("version") is None:
        return migrate(directory, manifest)
    return _checked(directory, manifest)


def _checked(directory: Path, manifest: dict) -> dict:
    version = manifest.get("version")
    if version is not None and version != VERSION:
        raise ConfigError(f"{directory / MANIFEST}: version {version!r}, and this trainmedic reads version "
                          f"{VERSION}: upgrade it")
    return manifest


def _load(directory: Path) -> dict:
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
