"""A signing key that follows its keys folder (docs/security.md, "Keys"): the executor signs its node's
reports with the key its folder names now, so that a rotation on the node (`trainmedic keys rotate
--node`) counts from the next report, without a restart.
"""

from __future__ import annotations

import logging
from pathlib import Path

from trainmedic.common.errors import ConfigError
from trainmedic.recovery.key_manifest import MANIFEST
from trainmedic.recovery.keyring import load_signing
from trainmedic.recovery.signing import SigningKey

log = logging.getLogger(__name__)


class SigningFolder:
    """The signing key of `role` in `directory`, loaded again when the folder's manifest changes: a
    rotation on this host (`trainmedic keys rotate --node`) counts from the next signature, without a
    restart. While the folder does not load, the key it had (said once per change). With no folder
    (`directory` None), `key` always."""

    def __init__(self, directory: Path | None, role: str, key: SigningKey) -> None:
        self._directory = directory
        self._role = role
        self._key = key
        self._seen = self._mtime()

    def current(self) -> SigningKey:
        seen = self._mtime()
        if seen != self._seen:
            self._seen = seen
            try:
                self._key = load_signing(self._directory, self._role)
            except ConfigError as err:
                log.error("keeping %s signing key %s: %s", self._role, self._key.key_id, err)
            else:
                log.info("%s signs with key %s from now on", self._role, self._key.key_id)
        return self._key

    def _mtime(self) -> int | None:
        if self._directory is None:
            return None
        try:
            return (self._directory / MANIFEST).stat().st_mtime_ns
        except OSError:
            return None
