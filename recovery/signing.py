"""Command signing: Ed25519 over a command's canonical JSON, each signature naming its key id.

Only the coordinator holds a private key (`SigningKey`); executors hold public keys
(`TrustedKeys`, key id -> key), so a node that is compromised can verify but never sign.
Several keys may be trusted at once, which is how keys rotate without downtime.

The signed bytes are the command's JSON object as sent, without `signature` and `key_id`,
in canonical form (RFC 8785 style): keys sorted by their UTF-16 code units, no whitespace,
UTF-8, strings escaped as JSON must, numbers exactly as the JSON text spells them. A
verifier checks the object it received, never a model it re-serialised, so another schema
version or another language computes the same bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from schemas import Command, encode

SIGNATURE_FIELDS = ("signature", "key_id")
KIND = "ed25519"


class _Number(str):
    """A JSON number kept as the text that spelled it (canonical bytes never re-format it)."""


def parse(raw: bytes | str) -> Any:
    """A JSON document as plain values, its numbers kept as their text. Raises ValueError."""
    return json.loads(raw, parse_int=_Number, parse_float=_Number, parse_constant=_Number)


def canonical(body: Mapping[str, Any]) -> bytes:
    """The bytes that are signed: `body` (as `parse` gives it) without its signature fields."""
    return _canonical({k: v for k, v in body.items() if k not in SIGNATURE_FIELDS}).encode("utf-8")


def _canonical(value: Any) -> str:
    if isinstance(value, _Number):
        return str(value)
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda item: item[0].encode("utf-16-be"))
        return "{" + ",".join(f"{_canonical(k)}:{_canonical(v)}" for k, v in items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_canonical(v) for v in value) + "]"
    # str, bool, None; and numbers of a body built in Python rather than parsed
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def key_id_of(public: Ed25519PublicKey) -> str:
    """A key's id: the first 16 hex digits of SHA-256 over its raw 32 bytes (stable, self-checking)."""
    raw = public.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True)
class SigningKey:
    """The coordinator's private key and its id."""

    key_id: str
    private: Ed25519PrivateKey

    @classmethod
    def of(cls, private: Ed25519PrivateKey) -> SigningKey:
        return cls(key_id_of(private.public_key()), private)

    def sign(self, command: Command) -> Command:
        """A copy of `command` carrying this key's id and its signature (base64) over the command's
        canonical JSON, as `encode` will send it."""
        body = parse(encode(command.model_copy(update={"signature": None, "key_id": None})))
        signature = self.private.sign(canonical(body))
        return command.model_copy(update={"key_id": self.key_id,
                                          "signature": base64.b64encode(signature).decode("ascii")})


@dataclass(frozen=True)
class TrustedKeys:
    """The public keys whose signatures a verifier accepts, by key id."""

    keys: Mapping[str, Ed25519PublicKey]

    @classmethod
    def of(cls, *publics: Ed25519PublicKey) -> TrustedKeys:
        return cls({key_id_of(public): public for public in publics})

    def check(self, received: bytes | str | Mapping[str, Any] | None) -> str | None:
        """Why the command as received (its exact JSON, or `parse` of it) is not authentic; None when
        it carries a valid signature by a trusted key. Never raises."""
        if received is None:
            return "unsigned: no JSON value"
        try:
            body = received if isinstance(received, Mapping) else parse(received)
        except (ValueError, UnicodeDecodeError) as err:
            return f"unsigned: not a JSON object ({err})"
        if not isinstance(body, Mapping):
            return "unsigned: not a JSON object"
        signature, key_id = body.get("signature"), body.get("key_id")
        if not signature:
            return "unsigned: the command carries no signature"
        if not isinstance(key_id, str) or not key_id:
            return "unsigned: the signature names no key id (an old HMAC signature?)"
        public = self.keys.get(key_id)
        if public is None:
            trusted = ", ".join(sorted(self.keys)) or "none"
            return f"unknown key id {key_id!r}: this node trusts {trusted}"
        try:
            public.verify(base64.b64decode(str(signature), validate=True), canonical(body))
        except (InvalidSignature, binascii.Error, ValueError):  # UnicodeError is a ValueError
            return f"bad signature: not made by key {key_id} over this command"
        return None


def generate() -> SigningKey:
    """A new random Ed25519 key pair."""
    return SigningKey.of(Ed25519PrivateKey.generate())
