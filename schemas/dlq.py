"""The dead-letter record: a message that did not validate, kept whole with the reason."""

from __future__ import annotations

import base64
from typing import Literal

from pydantic import ConfigDict

from schemas.base import Event


class DeadLettered(Event):
    """A message some consumer could not use. `value_b64` holds its exact bytes (of any size)."""

    model_config = ConfigDict(str_max_length=None)

    type: Literal["dead_letter"] = "dead_letter"
    reason: str
    source_topic: str
    partition: int
    offset: int
    key: str | None = None
    value_b64: str
    value_text: str | None = None

    @classmethod
    def of(
        cls, *, ts: float, reason: str, topic: str, partition: int, offset: int,
        key: bytes | None, value: bytes | None,
    ) -> DeadLettered:
        raw = value or b""
        try:
            text: str | None = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        return cls(
            ts=ts, reason=reason, source_topic=topic, partition=partition, offset=offset,
            key=key.decode("utf-8", "backslashreplace") if key is not None else None,
            value_b64=base64.b64encode(raw).decode("ascii"), value_text=text,
        )

    def raw_value(self) -> bytes:
        return base64.b64decode(self.value_b64)
