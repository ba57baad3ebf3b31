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
from trainmedic.local.enrollments import Refused
from trainmedic.local.invites import INVITES_FILE, HostAccepted, Invites, check_host
from trainmedic.recovery import key_manifest, keyring
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
    return {"keys": keys, "revoked": sorted(key_manifest.revoked(key_manifest.read(keys_dir)))}


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

    def keys(self, _body: bytes, _peer: str) -> tuple[int, dict]:
        """`GET /keys`: 200 with the key directory, 503 while it cannot be read."""
        try:
            return 200, directory(self.keys_dir)
        except ConfigError as err:  # a key file half written: the next ask sees it whole
            log.warning("registrar: cannot list the keys of %s: %s", self.keys_dir, err)
            return 503, {"error": "the registrar cannot list its keys now: try again in a moment"}

    def join(self, body: bytes, peer: str) -> tuple[int, dict]:
        """A host's join, answered: 200 with its files and the key directory, or an error saying what
        to do (a failure: registrar_http.answered). The checks run without the lock (a peer without a
        token holds up no node's join nor removal), then again under it."""
        verdict = self._check(body)
        if isinstance(verdict, HostAccepted):
            with self._lock:
                verdict = self._check(body)  # again: the token used meanwhile?
                if isinstance(verdict, HostAccepted):
                    return self._admit(verdict, peer)
        log.warning("registrar: host join refused from %s (%s): %s", peer, verdict.kind,
                    terminal_safe(verdict.message))
        return verdict.status, {"error": verdict.message}

    def _check(self, body: bytes) -> HostAccepted | Refused:
        """`check_host`, then whether this host's keys folder may trust its keys for their roles."""
        verdict = check_host(self.invites.load(), self._clock(), body, self.prefix)
        if not isinstance(verdict, HostAccepted):
            return verdict
        manifest = key_manifest.read(self.keys_dir)
        for key in verdict.join.keys:
            if key.key.key_id in key_manifest.revoked(manifest):
                return Refused(403, "revoked", f"the host's {key.role} key {key.key.key_id} was revoked "
                                               "here: make a new one on that host (`trainmedic keys rotate`)")
            known = key_manifest.role_of(manifest, key.key.key_id)
            if known not in (None, key.role):
                return Refused(409, "other_role", f"the host's {key.role} key {key.key.key_id} is trusted "
                                                  f"here as {known}: one key, one role")
        return verdict

    def _admit(self, accepted: HostAccepted, peer: str) -> tuple[int, dict]:
        """The answer made first (files, keys checked), then the token spent (one lost to a failure
        beats one usable twice), then the host's keys trusted here."""
        invitation, join = accepted.invitation, accepted.join
        files = {name: b64encode((self.credentials / name).read_bytes()).decode("ascii")
                 for name in role_files(invitation.roles)}  # an OSError: a 500, the token unspent
        try:
            self.invites.use(invitation.token.key_id, self._clock())
        except ConfigError:  # another registrar process redeemed it first
            return 409, {"error": "the token was used already (a token joins once): ask the broker host's "
                                  "admin for a new one"}
        trusted = [keyring.trust_public(self.keys_dir, public_of(key.key), key.role, self._clock())
                   for key in join.keys]
        log.info("registrar: a host of %s joined from %s with token %s; keys %s trusted here",
                 ", ".join(invitation.roles), peer, invitation.token.key_id, ", ".join(trusted) or "none")
        return 200, {"files": files, **directory(self.keys_dir)}
