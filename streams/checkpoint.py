"""The consumer engine's checkpoint: everything a restarted detector needs, in one message.

The detector's state, the watermark, the events `LiveDetector` still holds for ordering (with
where each came from), the newest event time of each partition and the next offset of every
telemetry partition are taken at the same moment and saved together. A detector restored
from it re-reads exactly the messages after those offsets: no event is lost or applied twice,
even after `kill -9`. Incidents decided after the checkpoint are decided
again, with the same ids. Encoded as zlib-compressed JSON.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass

from schemas import encode
from schemas.codec import TELEMETRY
from streams.core import DetectorState
from streams.live import Held, LiveDetector

VERSION = 1
Offsets = dict[tuple[str, int], int]  # (topic, partition) -> next offset to read


class CheckpointError(ValueError):
    """A checkpoint this version cannot read."""


class NewerCheckpoint(CheckpointError):
    """A checkpoint written by a newer trainmedic (a rollback): not to be overwritten blindly."""


@dataclass(frozen=True)
class Checkpoint:
    offsets: Offsets
    state: DetectorState
    watermark: float
    held: list[Held]
    sources: dict[tuple, tuple[float, float]]  # (topic, partition) -> (newest ts, quiet for s)


def encode_checkpoint(live: LiveDetector, offsets: Offsets, wall: float) -> bytes:
    head = json.dumps({
        "v": VERSION,
        "offsets": [[topic, partition, offset] for (topic, partition), offset in sorted(offsets.items())],
        "watermark": live.watermark if math.isfinite(live.watermark) else None,
        "sources": [[*source, max_ts, quiet_s] for source, (max_ts, quiet_s) in live.sources(wall).items()],
    }, separators=(",", ":")).encode()
    held = b",".join(b'{"origin":%s,"event":%s}' % (json.dumps(item.origin).encode(), encode(item.event))
                     for item in live.held())
    body = head[:-1] + b',"held":[' + held + b'],"state":' + live.detector.state.to_json() + b"}"
    return zlib.compress(body, 1)


def decode_checkpoint(data: bytes) -> Checkpoint:
    """Raises CheckpointError (NewerCheckpoint for a newer format) for anything it cannot use."""
    try:
        plain = json.loads(zlib.decompress(data))
        version = plain.get("v")
    except (zlib.error, ValueError, AttributeError) as err:
        raise CheckpointError(f"not a detector checkpoint: {err}") from None
    if isinstance(version, int) and version > VERSION:
        raise NewerCheckpoint(f"checkpoint format {version} was written by a newer trainmedic "
                              f"(this one reads {VERSION})")
    if version != VERSION:
        raise CheckpointError(f"checkpoint format {version!r}; this detector reads {VERSION}")
    try:
        watermark = plain["watermark"]
        return Checkpoint(
            offsets={(topic, partition): offset for topic, partition, offset in plain["offsets"]},
            state=DetectorState.from_dict(plain["state"]),
            watermark=float("-inf") if watermark is None else watermark,
            held=[Held(TELEMETRY.validate_python(item["event"]), _origin(item["origin"]))
                  for item in plain["held"]],
            sources={(topic, partition): (max_ts, quiet_s)
                     for topic, partition, max_ts, quiet_s in plain["sources"]},
        )
    except (KeyError, TypeError, ValueError) as err:  # pydantic's ValidationError is a ValueError
        raise CheckpointError(f"checkpoint unreadable: {type(err).__name__}: {err}") from None


def _origin(origin: object) -> object:
    return tuple(origin) if isinstance(origin, list) else origin
