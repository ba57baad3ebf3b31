"""The dead-letter record: a message that did not validate, with the reason, capped in size so that it
always fits the dlq topic (docs/security.md, "Poison records").
"""

from __future__ import annotations

import base64
import codecs
import hashlib
from typing import Literal

from pydantic import ConfigDict

from trainmedic.schemas.base import Event

VALUE_KEPT_BYTES = 16 * 1024  # of the value, kept in the letter (as base64, and as text if UTF-8)
KEY_KEPT_BYTES = 1024
REASON_KEPT_CHARS = 4096  # a validation error may quote the input
# The most one letter's JSON can take: each kept part at its worst (a control character is 6 bytes
# of JSON, `\u0001`), plus the fixed fields. A quarter of the broker's and librdkafka's default
# message limit (1,000,000 bytes): room for a dlq topic or a producer set below the default.
MAX_LETTER_BYTES = 256 * 1024


class DeadLettered(Event):
    """A message some consumer could not use, and why. `value_b64` holds its bytes, all of them
    unless `truncated` (then the first VALUE_KEPT_BYTES); `value_size` and `value_sha256` are the
    whole value's (absent from letters written before the cap)."""

    model_config = ConfigDict(str_max_length=None)

    type: Literal["dead_letter"] = "dead_letter"
    reason: str
    source_topic: str
    partition: int
    offset: int
    key: str | None = None
    value_b64: str
    value_text: str | None = None
    value_size: int | None = None
    value_sha256: str | None = None
    truncated: bool = False

    @classmethod
    def of(
        cls, *, ts: float, reason: str, topic: str, partition: int, offset: int,
        key: bytes | None, value: bytes | None,
    ) -> DeadLettered:
        raw = value or b""
        kept = raw[:VALUE_KEPT_BYTES]
        truncated = len(raw) > len(kept)
        try:  # a cut value's last character may be incomplete: its text ends before it
            text: str | None = codecs.getincrementaldecoder("utf-8")().decode(kept, final=not truncated)
        except UnicodeDecodeError:
            text = None
        return cls(  # a topic name is at most 249 characters in Kafka: cut only as a bound
            ts=ts, reason=_cut(reason, REASON_KEPT_CHARS), source_topic=_cut(topic, KEY_KEPT_BYTES),
            partition=partition, offset=offset, key=None if key is None else _key(key),
            value_b64=base64.b64encode(kept).decode("ascii"), value_text=text,
            value_size=len(raw), value_sha256=hashlib.sha256(raw).hexdigest(), truncated=truncated,
        )

    def raw_value(self) -> bytes:
        """The value's bytes as kept: all of them unless `truncated`."""
        return base64.b64decode(self.value_b64)


def _key(key: bytes) -> str:
    """A key as text (bytes that are not UTF-8 as `\\xff`), cut to KEY_KEPT_BYTES of the key."""
    if len(key) <= KEY_KEPT_BYTES:
        return _text(key.decode("utf-8", "backslashreplace"))
    text = key[:KEY_KEPT_BYTES].decode("utf-8", "backslashreplace")
    return f"{_text(text)}… ({len(key)} bytes in all)"


def _cut(text: str, most: int) -> str:
    """`text` with at most `most` characters of its own, and what it can always be encoded as
    (a lone surrogate, which JSON as UTF-8 cannot hold, as `\\ud800`)."""
    if len(text) <= most:
        return _text(text)
    return f"{_text(text[:most])}… ({len(text)} characters in all)"


def _text(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
