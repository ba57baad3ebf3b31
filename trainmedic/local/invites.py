"""Control-plane hosts invited on the broker's host (`trainmedic broker invite ROLE...`): each
invitation's token key, roles and expiry in `broker/invites.json` (0600, replaced whole), marked used
when its host joins; and whether a host's join (`POST /host`) may have its roles (`check_host`, pure,
time passed in). The broker's host is the deployment's root (it holds the CA's key and the admin's
password), so an invitation needs no operator's signature: whoever may write its `broker/` invites.

Every refusal of a well-formed join is 403, as for a node's (trainmedic/local/enrollments.py); 409
(token used) comes only after the token's signature verified.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from pydantic import ValidationError

from trainmedic.common.errors import ConfigError
from trainmedic.local import broker_auth
from trainmedic.local.enrollments import MAX_BODY, SKEW_S, Refused
from trainmedic.recovery.join_token import (
    HOST_ROLES,
    SIGNING_ROLES,
    make_token,
    possession,
    public_key_model,
    public_of,
)
from trainmedic.recovery.key_manifest import locked
from trainmedic.recovery.signing import TrustedKeys, Unverified
from trainmedic.schemas import HostJoin, PublicKey

INVITES_FILE = "invites.json"  # under HOME/broker
LOCK = ".invites.lock"  # held (flock) for each read-modify-write of INVITES_FILE
MAX_EXPIRES_S = 7 * 24 * 3600.0


@dataclass(frozen=True)
class Invitation:
    """One invitation: the token's public key, the roles, when it was made, until when it may be used,
    and when it was (None: not yet)."""

    token: PublicKey
    roles: tuple[str, ...]
    made: float
    expires: float
    used: float | None = None


@dataclass(frozen=True)
class HostAccepted:
    """A host's join let in: its request, and the invitation it redeems."""

    join: HostJoin
    invitation: Invitation


class Invites:
    """The invitations of a broker's host, by token key id, read from `path` at every look (`load`):
    `trainmedic broker invite` adds to the file while the registrar runs."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, Invitation]:
        try:
            data = json.loads(self.path.read_text())
            return {key_id: Invitation(PublicKey.model_validate(entry["token"]), tuple(entry["roles"]),
                                       entry["made"], entry["expires"], entry.get("used"))
                    for key_id, entry in data["invites"].items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise ConfigError(f"cannot read the invitations {self.path}: {err}") from None

    def add(self, invitation: Invitation) -> None:
        with locked(self.path.parent, LOCK):  # `broker invite` and the registrar's joins change it
            self._save({**self.load(), invitation.token.key_id: invitation})

    def use(self, key_id: str, now: float) -> None:
        """Mark the invitation used; ConfigError if it was (another registrar process came first)."""
        with locked(self.path.parent, LOCK):
            invites = self.load()
            if invites[key_id].used is not None:
                raise ConfigError(f"the invitation of token {key_id} was used already")
            invites[key_id] = replace(invites[key_id], used=now)
            self._save(invites)

    def _save(self, invites: dict[str, Invitation]) -> None:
        data = {"invites": {key_id: {"token": i.token.model_dump(), "roles": list(i.roles), "made": i.made,
                                     "expires": i.expires, "used": i.used} for key_id, i in invites.items()}}
        tmp = self.path.with_name(self.path.name + ".tmp")
        broker_auth.write_private(tmp, json.dumps(data, indent=2))
        os.replace(tmp, self.path)


def check_host(invites: dict[str, Invitation], now: float, body: bytes,
               deployment: str) -> HostAccepted | Refused:
    """Whether `body` (a `host_join` signed by a join token's key) may have its roles now: its token was
    invited for exactly these roles, has not expired nor been used, the request is dated from `SKEW_S`
    before the invitation to `SKEW_S` after `now`, and it carries one key per signing role it asks for."""
    if len(body) > MAX_BODY:
        return Refused(413, "too_large", f"the join is {len(body)} bytes, at most {MAX_BODY}")
    try:
        join = HostJoin.model_validate_json(body)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "the body"
        return Refused(400, "invalid", f"not a host's join: {where}: {first['msg']}")
    invite = "ask the broker host's admin for a new one (`trainmedic broker invite ROLE...`)"
    invitation = invites.get(join.key_id or "")
    if invitation is None:
        return Refused(403, "not_invited", f"no invitation here is of this token: {invite}")
    try:
        TrustedKeys.of(public_of(invitation.token)).signer(body, "host's join", deployment)
    except (Unverified, ValueError) as err:
        return Refused(403, getattr(err, "kind", "bad_invitation"), f"the host's join refused: {err}")
    if tuple(join.roles) != invitation.roles:
        return Refused(403, "other_roles", f"the token invites a host of {', '.join(invitation.roles)}, "
                                           f"not of {', '.join(join.roles)}")
    signing = sorted(role for role in join.roles if role in SIGNING_ROLES)
    if sorted(key.role for key in join.keys) != signing:
        return Refused(400, "keys", f"a host of {', '.join(join.roles)} registers one key for each of "
                                    f"{', '.join(signing) or 'no role'}, and no other")
    for key in join.keys:
        try:
            public_of(key.key).verify(base64.b64decode(key.proof or "", validate=True),
                                      possession(invitation.token.key_id, key.role, deployment))
        except ValueError as err:
            return Refused(400, "keys", f"the host's {key.role} key is none: {err}")
        except (InvalidSignature, binascii.Error):
            return Refused(403, "keys", f"the host's {key.role} key {key.key.key_id} does not prove the host "
                                        "holds it (its proof does not verify)")
        if key.key.key_id == invitation.token.key_id:
            return Refused(400, "keys", "the host registers the token's own key: make a key of its own")
    if now >= invitation.expires:
        return Refused(403, "expired", f"the token expired {now - invitation.expires:.0f}s ago: {invite}")
    if not invitation.made - SKEW_S <= join.ts <= now + SKEW_S:
        return Refused(403, "clock", f"the join is dated more than {SKEW_S:.0f}s off the invitation's "
                                     "span or the registrar's clock: set this host's clock right (NTP), "
                                     "then join again")
    if invitation.used is not None:
        return Refused(409, "used", f"the token was used already (a token joins once): {invite}")
    return HostAccepted(join, invitation)


def invite(broker_dir: Path, ca_pem: bytes, roles: tuple[str, ...], ttl_s: float, port: int,
           now: float) -> tuple[str, float]:
    """A new invitation of a host of `roles` for `ttl_s` from `now`: its token (text) and its expiry."""
    if not roles or len(set(roles)) != len(roles) or not set(roles) <= set(HOST_ROLES):
        raise ConfigError(f"invite which roles? {', '.join(roles)}: each of {', '.join(HOST_ROLES)} once")
    if not 0 < ttl_s <= MAX_EXPIRES_S or not 0 < port < 65536:
        raise ConfigError(f"--expires must be a span up to {MAX_EXPIRES_S / 86400:.0f} days, "
                          "--registrar-port from 1 to 65535")
    token, key = make_token(None, ca_pem, port, roles)
    Invites(broker_dir / INVITES_FILE).add(Invitation(public_key_model(key.private.public_key()), roles, now,
                                                      now + ttl_s))
    return token, now + ttl_s


def roles_of(words: list[str]) -> tuple[str, ...]:
    """The roles `trainmedic broker invite` names, in HOST_ROLES order; ConfigError for an unknown one."""
    unknown = sorted(set(words) - set(HOST_ROLES))
    if unknown or not words:
        raise ConfigError(f"invite which roles? {', '.join(unknown) or 'none given'}: name some of "
                          f"{', '.join(HOST_ROLES)} (a control host: detector coordinator)")
    return tuple(role for role in HOST_ROLES if role in words)
