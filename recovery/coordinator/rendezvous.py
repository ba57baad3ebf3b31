"""The root key of every generation's rendezvous secret (core/rendezvous.py): derived from the
coordinator's signing key, so that a coordinator that restarts, or another holding the same key,
derives the same secrets and nothing else can; an insecure coordinator's is a key of its own process.
"""

from __future__ import annotations

import hashlib
import hmac
import os

from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from trainmedic.recovery.signing import SigningKey


def rendezvous_root(signing: SigningKey | None) -> bytes:
    if signing is None:
        return os.urandom(32)
    raw = signing.private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return hmac.new(raw, b"trainmedic rendezvous", hashlib.sha256).digest()
