"""A join token: what lets one enrolled node register itself, once (`trainmedic nodes enroll`,
`trainmedic node --join`), or one control-plane host get its roles, once (`trainmedic broker invite`,
`trainmedic join`). It names the node (or the roles), pins the broker's CA (SHA-256 of its PEM bytes),
gives the registrar's port, and carries a 32-byte secret from which the token's Ed25519 key is derived:
the enrollment on `nodes` (the invitation on the broker's host) holds that key's public half, the
registration is signed with it.

Format: `tmjoin1.` then base64url, unpadded, of JSON {node or roles, ca, port, secret (64 hex digits)}.
Pure.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import secrets
from dataclasses import dataclass, field

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from trainmedic.recovery.signing import SigningKey, key_id_of
from trainmedic.schemas.nodes import PublicKey

__all__ = ["HOST_ROLES", "NODE_FILES", "PREFIX", "SIGNING_ROLES", "JoinToken", "ca_pin", "make_token",
           "parse", "possession", "public_key_model", "public_of", "role_files", "token_key"]

PREFIX = "tmjoin1."
SECRET_BYTES = 32
MAX_TOKEN = 1024  # characters: a token is at most about 350 (a node's name has at most 63)
# What the registrar answers a join with, each file in base64: the node's folder as
# `broker add-node` writes it (its agent's and executor's role files, the CA, its telemetry key).
NODE_FILES = ("agent.json", "executor.json", "ca.pem", "telemetry.key")
_PERSON = b"trainmedic-join1"  # blake2b personalisation (16 bytes): join tokens, version 1
_SALT = b"token-key"
_HEX64 = re.compile(r"[0-9a-f]{64}")
_FIELDS = {"ca", "port", "secret"}  # and "node" (a node's token) or "roles" (a control-plane host's)
# The roles a control-plane host is invited to, and what the registrar answers its join with (besides
# ca.pem): each role's file, the detector's the telemetry master key too. Coordinators and operators
# sign: their hosts make a key pair of the role at the join, and the broker's host trusts its public half.
HOST_ROLES = {"coordinator": ("coordinator.json",), "detector": ("detector.json", "telemetry-master.key"),
              "operator": ("operator.json",)}
SIGNING_ROLES = ("coordinator", "operator")  # of HOST_ROLES: a host given one makes a key pair of it


def possession(token_key_id: str, role: str, deployment: str | None) -> bytes:
    """What a joining host's key of `role` signs to prove the host holds it, for this join token (its
    key's id) and deployment only: a token's holder cannot get another party's key trusted."""
    return f"trainmedic host key v1\n{token_key_id}\n{role}\n{deployment or ''}".encode()


def role_files(roles: tuple[str, ...]) -> tuple[str, ...]:
    """The files a host of `roles` gets at its join: ca.pem and each role's (HOST_ROLES)."""
    return ("ca.pem", *(name for role in roles for name in HOST_ROLES[role]))


@dataclass(frozen=True)
class JoinToken:
    """A token's contents: the node it enrolls (None: a control-plane host's, of `roles`), the CA's
    SHA-256 (hex), the registrar's port, the secret."""

    node: str | None
    ca_sha256: str
    port: int
    secret: bytes = field(repr=False)
    roles: tuple[str, ...] = ()

    def __str__(self) -> str:
        whose = {"node": self.node} if self.node is not None else {"roles": list(self.roles)}
        body = json.dumps({**whose, "ca": self.ca_sha256, "port": self.port, "secret": self.secret.hex()},
                          separators=(",", ":"))
        return PREFIX + base64.urlsafe_b64encode(body.encode()).decode("ascii").rstrip("=")


def ca_pin(ca_pem: bytes) -> str:
    """What a token pins: the SHA-256 (hex) of the CA's PEM file, byte for byte."""
    return hashlib.sha256(ca_pem).hexdigest()


def token_key(secret: bytes) -> SigningKey:
    """The token's Ed25519 key: its seed a keyed BLAKE2b of the secret (so the secret itself is never
    a key on the wire, and no other use of it makes the same key)."""
    if len(secret) != SECRET_BYTES:
        raise ValueError(f"a join token's secret is {SECRET_BYTES} bytes, not {len(secret)}")
    seed = hashlib.blake2b(b"ed25519", key=secret, digest_size=32, person=_PERSON, salt=_SALT).digest()
    return SigningKey.of(Ed25519PrivateKey.from_private_bytes(seed))


def make_token(node: str | None, ca_pem: bytes, port: int,
               roles: tuple[str, ...] = ()) -> tuple[str, SigningKey]:
    """A new token for `node` (or a host of `roles`; a fresh secret), as text, and its signing key."""
    token = JoinToken(node, ca_pin(ca_pem), port, secrets.token_bytes(SECRET_BYTES), roles)
    return str(token), token_key(token.secret)


def parse(text: str) -> JoinToken:
    """The token `text` holds; ValueError saying what is wrong with it (never echoing the secret)."""
    text = text.strip()
    if len(text) > MAX_TOKEN:  # before decoding: a long one may nest JSON deep enough to overflow
        raise ValueError(f"not a join token: {len(text)} characters, at most {MAX_TOKEN}")
    if not text.startswith(PREFIX):
        raise ValueError(f"not a join token: it must start with {PREFIX!r} (`trainmedic nodes enroll` "
                         "prints one on its last line)")
    body = text[len(PREFIX):]
    try:
        data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (ValueError, binascii.Error, RecursionError) as err:
        raise ValueError(f"not a join token: cannot decode it ({type(err).__name__}): was it cut?") from None
    if not isinstance(data, dict) or set(data) not in (_FIELDS | {"node"}, _FIELDS | {"roles"}):
        raise ValueError(f"not a join token: it must hold {', '.join(sorted(_FIELDS))}, and node or roles")
    node, roles = data.get("node"), data.get("roles")
    ca, port, secret = data["ca"], data["port"], data["secret"]
    if "node" in data and (not isinstance(node, str) or not 0 < len(node) <= 256):
        raise ValueError("not a join token: its node is no name")
    if "roles" in data and (not isinstance(roles, list) or not roles
                            or not all(isinstance(role, str) and role in HOST_ROLES for role in roles)
                            or len(set(roles)) != len(roles)):
        raise ValueError(f"not a join token: its roles are not some of {', '.join(HOST_ROLES)}")
    if not isinstance(ca, str) or not _HEX64.fullmatch(ca):
        raise ValueError("not a join token: its CA pin is not a SHA-256 in hex")
    if type(port) is not int or not 0 < port < 65536:
        raise ValueError("not a join token: its port is not from 1 to 65535")
    if not isinstance(secret, str) or not _HEX64.fullmatch(secret):
        raise ValueError("not a join token: its secret is not 32 bytes in hex")
    return JoinToken(node, ca, port, bytes.fromhex(secret), tuple(roles or ()))


def public_key_model(public: Ed25519PublicKey) -> PublicKey:
    """A public key as the schemas carry it: its id and its 32 bytes in base64."""
    raw = public.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return PublicKey(key_id=key_id_of(public), public=base64.b64encode(raw).decode("ascii"))


def public_of(model: PublicKey) -> Ed25519PublicKey:
    """The Ed25519 key a `PublicKey` carries; ValueError when it is none, or its id is another's."""
    try:
        raw = base64.b64decode(model.public, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"public key {model.key_id!r}: not base64") from None
    if len(raw) != 32:
        raise ValueError(f"public key {model.key_id!r}: {len(raw)} bytes, an Ed25519 key has 32")
    public = Ed25519PublicKey.from_public_bytes(raw)
    if key_id_of(public) != model.key_id:
        raise ValueError(f"public key {model.key_id!r}: its bytes are key {key_id_of(public)}'s")
    return public
