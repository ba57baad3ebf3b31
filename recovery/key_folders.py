"""Keys that follow their folder (docs/security.md, "Keys"), without a restart: what a verifier
trusts (`KeyFolder`: a key trusted, revoked or removed counts from its next look), and the key a signer
signs with (`SigningFolder`: the executor signs its node's reports with the key its folder names now, so
that a rotation on the node, `trainmedic keys rotate --node`, counts from the next report).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Generic, TypeVar, cast

from trainmedic.common.errors import ConfigError
from trainmedic.recovery import key_manifest
from trainmedic.recovery.key_manifest import MANIFEST
from trainmedic.recovery.keyring import load_signing, reload_trusted
from trainmedic.recovery.signing import SigningKey

log = logging.getLogger(__name__)


Trust = TypeVar("Trust")


class KeyFolder(Generic[Trust]):
    """What a verifier trusts from a folder (`load` of it), loaded again when its ID.pub files or its
    manifest change: a key copied in for a rotation is trusted, one removed or revoked no longer is
    (the last of its role included: `load` must not raise for a role left with no key), without a
    restart. The first look loads it again too: it may have changed since `trusted` was. When `load`
    fails (a key file half copied), what was trusted is kept but for the keys revoked there since.
    `trusted` is a TrustedKeys, a mapping of them, or has a `without(revoked ids)` as they do."""

    def __init__(self, directory: Path, trusted: Trust,
                 load: Callable[[Path], Trust] = reload_trusted) -> None:
        self._directory = directory
        self._trusted = trusted
        self._load = load
        self._seen: tuple | None = None  # the folder as `trusted` was last loaded from it

    def trusted(self) -> Trust:
        seen = self._fingerprint()
        if seen != self._seen:
            try:
                self._trusted = self._load(self._directory)
            except ConfigError as err:  # a half-copied key file: keep what was trusted, try again
                self._trusted = _without(self._trusted, _revoked_ids(self._directory))
                log.error("keeping the trusted keys of %s, but for those revoked there: %s", self._directory,
                          err)
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


def _revoked_ids(directory: Path) -> frozenset[str]:
    try:
        return frozenset(key_manifest.revoked(key_manifest.read(directory)))
    except ConfigError:  # keys.json unreadable: nothing more is known
        return frozenset()


def _without(trusted: Trust, revoked: frozenset[str]) -> Trust:
    """`trusted` less the keys `revoked`."""
    if not revoked:
        return trusted
    if isinstance(trusted, Mapping):
        return cast(Trust, {role: keys.without(revoked) for role, keys in trusted.items()})
    return cast(Trust, trusted.without(revoked))  # type: ignore[attr-defined]


class SigningFolder:
    """The signing key of `role` in `directory`, loaded again when the folder's manifest changes: a
    rotation on this host (`trainmedic keys rotate --node`) counts from the next signature, without a
    restart. While the folder does not load, the key it had, tried again at every signature (said once
    per change of the folder). With no folder (`directory` None), `key` always."""

    def __init__(self, directory: Path | None, role: str, key: SigningKey) -> None:
        self._directory = directory
        self._role = role
        self._key = key
        self._seen: int | None = None  # the manifest as `key` was last loaded from it: the first look loads
        self._failed: int | None = None  # the manifest as a load last failed

    def current(self) -> SigningKey:
        seen = self._mtime()
        if self._directory is None or seen == self._seen:
            return self._key
        try:
            loaded = load_signing(self._directory, self._role)
        except ConfigError as err:
            if seen != self._failed:
                self._failed = seen
                log.error("keeping %s signing key %s (tried again at every signature): %s", self._role,
                          self._key.key_id, err)
            return self._key
        self._seen = seen
        if loaded.key_id != self._key.key_id:
            log.info("%s signs with key %s from now on (was %s)", self._role, loaded.key_id, self._key.key_id)
            self._key = loaded
        return self._key

    def _mtime(self) -> int | None:
        if self._directory is None:
            return None
        try:
            return (self._directory / MANIFEST).stat().st_mtime_ns
        except OSError:
            return None
