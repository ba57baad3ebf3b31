"""The registrar's door for control-plane hosts (`POST /host`) and its key directory (`GET /keys`).

A host invited on the broker's host (`trainmedic broker invite`, trainmedic/local/invites.py) joins
once with its token: the invitation is marked used, the host's own public keys are trusted on the
broker's host for their roles (an operator's then signs enrollments the registrar believes), and the
host gets its roles' files from the broker host's `credentials/` and every coordinator and operator key
trusted there. `GET /keys` gives that directory to any host at any time (`trainmedic keys sync`): public
keys only, over TLS the host verifies against the pinned CA (docs/security.md, "One identity per node").
"""

from __future__ import annotations

import logging
import threading
import time
from base64 import b64encode
from collections.abc import Callable
from pathlib import Path

from trainmedic.common.errors import ConfigError
from trainmedic.local.invites import INVITES_FILE, HostAccepted, Invites, check_host
from trainmedic.recovery import keyring
from trainmedic.recovery.join_token import public_key_model, public_of, role_files
from trainmedic.recovery.signing import TrustedKeys
from trainmedic.schemas.printable import terminal_safe

log = logging.getLogger("trainmedic.registrar")

DIRECTORY_ROLES = (keyring.COORDINATOR, keyring.OPERATOR)


def directory(keys_dir: Path) -> dict:
    """The coordinator and operator keys `keys_dir` trusts, each with its role, and the ids revoked there."""
    roles = keyring.load_roles(keys_dir)
    keys = [{"role": role, "key": public_key_model(public).model_dump()}
            for role in DIRECTORY_ROLES for public in roles.get(role, TrustedKeys({})).keys.values()]
    revoked = sorted(set().union(*(trusted.revoked for trusted in roles.values())))
    return {"keys": keys, "revoked": revoked}


class HostDoor:
    """Admits invited hosts one at a time (`lock`, shared with the registrar's node joins)."""

    def __init__(self, broker_dir: Path, credentials: Path, keys_dir: Path, prefix: str, lock: threading.Lock,
                 clock: Callable[[], float] = time.time) -> None:
        self.invites = Invites(broker_dir / INVITES_FILE)
        self.credentials = credentials
        self.keys_dir = keys_dir
        self.prefix = prefix
        self._lock = lock
        self._clock = clock

    def keys(self) -> tuple[int, dict]:
        """`GET /keys`: 200 with the key directory, 503 while it cannot be read."""
        try:
            return 200, directory(self.keys_dir)
        except ConfigError as err:  # a key file half written: the next ask sees it whole
            log.warning("registrar: cannot list the keys of %s: %s", self.keys_dir, err)
            return 503, {"error": "the registrar cannot list its keys now: try again in a moment"}

    def join(self, body: bytes, peer: str) -> tuple[int, dict]:
        """A host's join, answered: 200 with its files and the key directory, or an error saying what
        to do (a failure: registrar_http.answered)."""
        with self._lock:
            verdict = check_host(self.invites.load(), self._clock(), body, self.prefix)
            if isinstance(verdict, HostAccepted):
                return self._admit(verdict, peer)
        log.warning("registrar: host join refused from %s (%s): %s", peer, verdict.kind,
                    terminal_safe(verdict.message))
        return verdict.status, {"error": verdict.message}

    def _admit(self, accepted: HostAccepted, peer: str) -> tuple[int, dict]:
        """The token spent first (one lost to a failure beats one usable twice), then the host's keys
        trusted here and its files read."""
        invitation, join = accepted.invitation, accepted.join
        self.invites.use(invitation.token.key_id, self._clock())
        try:
            trusted = [keyring.trust_public(self.keys_dir, public_of(key.key), key.role, self._clock())
                       for key in join.keys]
            files = {name: b64encode((self.credentials / name).read_bytes()).decode("ascii")
                     for name in role_files(invitation.roles)}
        except (ConfigError, ValueError, OSError) as err:
            log.error("registrar: could not admit the host of %s from %s, and its token is spent: %s",
                      ", ".join(invitation.roles), peer, err)
            return 503, {"error": "the registrar could not admit this host (its log on the broker's host "
                                  "says why), and the token is spent: ask the broker host's admin for a new "
                                  "one"}
        log.info("registrar: a host of %s joined from %s with token %s; keys %s trusted here",
                 ", ".join(invitation.roles), peer, invitation.token.key_id, ", ".join(trusted) or "none")
        return 200, {"files": files, **directory(self.keys_dir)}
