"""The consumer engine's checkpoint: everything a restarted detector needs, in one message.

The detector's state, the watermark, the events `LiveDetector` still holds for ordering (with
where each came from), the newest event time of each partition and the next offset of every
telemetry partition are taken at the same moment and saved together. A detector restored
from it re-reads exactly the messages after those offsets: no event is lost or applied twice,
even after `kill -9`. Incidents decided after the checkpoint are decided again, with the same
ids.

Format: one line of JSON (version, offsets, watermark, sources, the state's length, and in one
flat list per held event its seq, topic, partition, offset, key and length), then the state as
JSON, then the held events' message values exactly as they arrived, back to back. Held events
are not re-encoded and nothing is compressed here: at 35k events/s the detector holds ~35k of
them, and re-encoding them and zlib over the lot cost 0.7 s of the loop's thread per
checkpoint with 68k held. The producer compresses (lz4) on librdkafka's own thread.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from schemas import encode
from schemas.codec import TELEMETRY
from streams.core import DetectorState
from streams.live import Held, LiveDetector

VERSION = 1
_NO_ORIGIN = (None, None, None, None)  # topic, partition, offset, key of an event fed without one
HELD_FIELDS = 6  # per held event in the head's flat list: seq, topic, partition, offset, key, length
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
    held: list[Held]  # origins as the pipeline gives them: (topic, partition, offset, key, value)
    sources: dict[tuple, tuple[float, float]]  # (topic, partition) -> (newest ts, quiet for s)


def encode_checkpoint(live: LiveDetector, offsets: Offsets, wall: float) -> bytes:
    """`live`'s held events must have the pipeline's origins, or None (then they are re-encoded)."""
    held = [item if item.origin is not None else Held(item.event, (*_NO_ORIGIN, encode(item.event)), item.seq)
            for item in live.held()]
    state = live.detector.state.to_json()
    head = json.dumps({
        "v": VERSION,
        "offsets": [[topic, partition, offset] for (topic, partition), offset in sorted(offsets.items())],
        "watermark": live.watermark if math.isfinite(live.watermark) else None,
        "sources": [[*source, max_ts, quiet_s] for source, (max_ts, quiet_s) in live.sources(wall).items()],
        "state": len(state),
        "held": [field for item in held for field in (item.seq, *item.origin[:4], len(item.origin[4]))],
    }, separators=(",", ":")).encode()
    return b"".join([head, b"\n", state, *(item.origin[4] for item in held)])


def decode_checkpoint(data: bytes) -> Checkpoint:
    """Raises CheckpointError (NewerCheckpoint for a newer format) for anything it cannot use."""
    try:
        line, _, rest = data.partition(b"\n")
        head = json.loads(line)
        version = head.get("v")
    except (ValueError, AttributeError) as err:
        raise CheckpointError(f"not a detector checkpoint: {err}") from None
    if type(version) is int and version > VERSION:
        raise NewerCheckpoint(f"checkpoint format {version} was written by a newer trainmedic "
                              f"(this one reads {VERSION})")
    if type(version) is not int or version != VERSION:
        raise CheckpointError(f"checkpoint format {version!r}; this detector reads {VERSION}")
    try:
        at = head["state"]
        state = DetectorState.from_dict(json.loads(rest[:at]))
        held = []
        flat = head["held"]
        for i in range(0, len(flat), HELD_FIELDS):
            seq, topic, partition, offset, key, length = flat[i:i + HELD_FIELDS]
            value = rest[at:at + length]
            at += length
            origin = None if topic is None else (topic, partition, offset, key, value)
            held.append(Held(TELEMETRY.validate_json(value), origin, seq))
        if at != len(rest):
            raise ValueError(f"{len(rest) - at} bytes past the last held event")
        watermark = head["watermark"]
        return Checkpoint(
            offsets={(topic, partition): offset for topic, partition, offset in head["offsets"]},
            state=state,
            watermark=float("-inf") if watermark is None else watermark,
            held=held,
            sources={(topic, partition): (max_ts, quiet_s)
                     for topic, partition, max_ts, quiet_s in head["sources"]},
        )
    except Exception as err:  # whatever a damaged or foreign checkpoint makes the decoding raise
        raise CheckpointError(f"checkpoint unreadable: {type(err).__name__}: {err}") from None
