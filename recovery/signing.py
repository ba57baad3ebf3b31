"""Signed records: Ed25519 over a record's canonical JSON (as sent), each signature naming its key id
and the deployment it was signed for (docs/security.md, "Signing: commands, jobs, node events and acks").
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from pydantic import BaseModel

from trainmedic.schemas import encode

SIGNATURE_FIELDS = ("signature", "key_id")
KIND = "ed25519"

Signable = TypeVar("Signable", bound=BaseModel)  # a model with `signature` and `key_id` fields


class Unverified(ValueError):
    """Why a record is not authentic; `kind` (unsigned, unknown_key, revoked, bad_signature, wrong_node,
    other_deployment, ...) is a short label for metrics, the message the reason for the dlq or the refusal."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


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
    """A private key (the coordinator's, an operator's or a node's) and its id."""

    key_id: str
    private: Ed25519PrivateKey

    @classmethod
    def of(cls, private: Ed25519PrivateKey) -> SigningKey:
        return cls(key_id_of(private.public_key()), private)

    def sign(self, record: Signable) -> Signable:
        """A copy of `record` carrying this key's id and its signature (base64) over the record's
        canonical JSON, as `encode` will send it."""
        body = parse(encode(record.model_copy(update={"signature": None, "key_id": None})))
        signature = self.private.sign(canonical(body))
        return record.model_copy(update={"key_id": self.key_id,
                                         "signature": base64.b64encode(signature).decode("ascii")})


@dataclass(frozen=True)
class TrustedKeys:
    """The public keys whose signatures a verifier accepts, by key id, and the ids revoked where they
    were loaded (a record one of them signed is refused as `revoked` rather than `unknown_key`)."""

    keys: Mapping[str, Ed25519PublicKey]
    revoked: frozenset[str] = frozenset()

    @classmethod
    def of(cls, *publics: Ed25519PublicKey) -> TrustedKeys:
        return cls({key_id_of(public): public for public in publics})

    def without(self, revoked: frozenset[str]) -> TrustedKeys:
        """These keys but those `revoked`, which are refused as revoked."""
        return TrustedKeys({k: v for k, v in self.keys.items() if k not in revoked}, self.revoked | revoked)

    def __str__(self) -> str:
        """The trusted ids, the first few of a long list (a coordinator trusts a key per node)."""
        ids = sorted(self.keys)
        return ", ".join(ids[:8]) + (f" and {len(ids) - 8} more" if len(ids) > 8 else "") or "none"

    def check(self, received: bytes | str | Mapping[str, Any] | None, what: str = "command",
              deployment: str | None = None) -> str | None:
        """Why `received` (a record's exact JSON, or `parse` of it) is not authentic; None when it
        carries a valid signature by a trusted key (for `deployment`, when given). Never raises."""
        try:
            self.signer(received, what, deployment)
        except Unverified as err:
            return str(err)
        return None

    def signer(self, received: bytes | str | Mapping[str, Any] | None, what: str = "command",
               deployment: str | None = None) -> str:
        """The id of the trusted key whose valid signature `received` carries, signed for
        `deployment` when one is given (the verifier's own topic prefix); else Unverified."""
        if received is None:
            raise Unverified("unsigned", "unsigned: no JSON value")
        try:
            body = received if isinstance(received, Mapping) else parse(received)
        except (ValueError, UnicodeDecodeError) as err:
            raise Unverified("unsigned", f"unsigned: not a JSON object ({err})") from None
        if not isinstance(body, Mapping):
            raise Unverified("unsigned", "unsigned: not a JSON object")
        signature, key_id = body.get("signature"), body.get("key_id")
        if not signature:
            raise Unverified("unsigned", f"unsigned: the {what} carries no signature")
        if not isinstance(key_id, str) or not key_id:
            raise Unverified("unsigned", "unsigned: the signature names no key id (an old HMAC signature?)")
        public = self.keys.get(key_id)
        if public is None and key_id in self.revoked:
            raise Unverified("revoked", f"revoked key id {key_id!r}")
        if public is None:
            trusted = str(self)
            raise Unverified("unknown_key", f"unknown key id {key_id!r}: this node trusts {trusted}"
                             if what == "command" else f"unknown key id {key_id!r}: trusted are {trusted}")
        try:
            public.verify(base64.b64decode(str(signature), validate=True), canonical(body))
        except (InvalidSignature, binascii.Error, ValueError):  # UnicodeError is a ValueError
            raise Unverified("bad_signature",
                             f"bad signature: not made by key {key_id} over this {what}") from None
        signed_for = body.get("deployment")
        if deployment is not None and signed_for != deployment:
            raise Unverified("other_deployment", f"other deployment: the {what} was signed for "
                             + (f"deployment {signed_for!r}" if signed_for else "no deployment")
                             + f", this is {deployment!r}")
        return key_id


def generate() -> SigningKey:
    """A new random Ed25519 key pair."""
    return SigningKey.of(Ed25519PrivateKey.generate())
