"""The consumer engine's checkpoint: everything a restarted detector needs, in one message.

The detector's state, the watermark, the events `LiveDetector` still holds for ordering and the
next offset of every telemetry partition are taken at the same moment and saved together. A
detector restored from it re-reads exactly the messages after those offsets: no event is lost
or applied twice, even after `kill -9`. Incidents decided after the checkpoint are decided
again, with the same ids. Encoded as zlib-compressed JSON.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass

from pydantic import BaseModel

from schemas import encode
from schemas.codec import TELEMETRY
from streams.core import DetectorState
from streams.live import LiveDetector

VERSION = 1
Offsets = dict[tuple[str, int], int]  # (topic, partition) -> next offset to read


class CheckpointError(ValueError):
    """A checkpoint this version cannot read."""


@dataclass(frozen=True)
class Checkpoint:
    offsets: Offsets
    state: DetectorState
    watermark: float
    held: list[BaseModel]


def encode_checkpoint(live: LiveDetector, offsets: Offsets) -> bytes:
    head = json.dumps({
        "v": VERSION,
        "offsets": [[topic, partition, offset] for (topic, partition), offset in sorted(offsets.items())],
        "watermark": live.watermark if math.isfinite(live.watermark) else None,
    }, separators=(",", ":")).encode()
    held = b",".join(encode(event) for event in live.held())
    body = head[:-1] + b',"held":[' + held + b'],"state":' + live.detector.state.to_json() + b"}"
    return zlib.compress(body, 1)


def decode_checkpoint(data: bytes) -> Checkpoint:
    try:
        plain = json.loads(zlib.decompress(data))
    except (zlib.error, ValueError) as err:
        raise CheckpointError(f"not a detector checkpoint: {err}") from None
    if plain.get("v") != VERSION:
        raise CheckpointError(f"checkpoint version {plain.get('v')!r}; this detector reads {VERSION}")
    watermark = plain["watermark"]
    return Checkpoint(
        offsets={(topic, partition): offset for topic, partition, offset in plain["offsets"]},
        state=DetectorState.from_dict(plain["state"]),
        watermark=float("-inf") if watermark is None else watermark,
        held=[TELEMETRY.validate_python(event) for event in plain["held"]],
    )
