"""Command signing: HMAC-SHA256 with the cluster key over a command's canonical JSON.

The canonical form is every field of the command except `signature` (extra fields
included), dumped as JSON with sorted keys and compact separators. The coordinator signs
with `sign`, executors check with `verify`.

Key sources, in order: TRAINMEDIC_CLUSTER_KEY_FILE (a file holding the key; surrounding
whitespace is stripped), then TRAINMEDIC_CLUSTER_KEY (the key itself).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from pathlib import Path

from bus.errors import ConfigError
from schemas import Command

KEY_FILE_ENV = "TRAINMEDIC_CLUSTER_KEY_FILE"
KEY_ENV = "TRAINMEDIC_CLUSTER_KEY"


def canonical(command: Command) -> bytes:
    """The bytes that are signed: the command without its signature, as canonical JSON."""
    body = command.model_dump(mode="json", exclude={"signature"})
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def signature_of(command: Command, key: bytes) -> str:
    return hmac.new(key, canonical(command), hashlib.sha256).hexdigest()


def sign(command: Command, key: bytes) -> Command:
    """A copy of `command` carrying its HMAC-SHA256 signature (hex)."""
    return command.model_copy(update={"signature": signature_of(command, key)})


def verify(command: Command, key: bytes) -> bool:
    """True when `command` carries a valid signature made with `key` (constant-time compare). Any
    text is only a wrong signature: bytes are compared, since compare_digest raises on non-ASCII str."""
    if not command.signature:
        return False
    return hmac.compare_digest(command.signature.encode("utf-8"), signature_of(command, key).encode("ascii"))


def load_key(env: Mapping[str, str] = os.environ) -> bytes | None:
    """The cluster key from the environment, or None when neither variable is set."""
    path = env.get(KEY_FILE_ENV)
    if path:
        try:
            key = Path(path).read_bytes().strip()
        except OSError as err:
            raise ConfigError(f"{KEY_FILE_ENV}={path}: cannot read the cluster key: {err.strerror}") from None
        if not key:
            raise ConfigError(f"{KEY_FILE_ENV}={path}: the key file is empty")
        return key
    key_text = env.get(KEY_ENV, "").strip()
    return key_text.encode("utf-8") if key_text else None
