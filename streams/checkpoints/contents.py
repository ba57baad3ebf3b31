"""The detector's checkpoint, the one both engines save and restore: everything a restart needs.

The detector's state, the watermark, the events `LiveDetector` still holds for ordering (with
the message each came from), the newest event time of each partition and the next offset of
every telemetry partition are taken at the same moment and saved together. Events waiting unfed
behind a slow partition (`LiveConfig.order_at`) are left to Kafka: their partition's offset is that
of the first of them (`rewind`; the sharded decider also reads its events topic again from the
message that carried it: `trainmedic.streams.engines.batches.Carriers`). A detector restored
from it re-reads exactly the messages after those offsets: no event is lost or applied twice,
even after `kill -9`. Incidents decided after the checkpoint are decided again, with the same
ids. `streams/checkpoints/topic.py` keeps checkpoints on Kafka; `Cadence` says when to take one.

Format 5: one line of JSON (version, owner, offsets, watermark, sources, the state's length and
the number of held events), then the state, then the held events, each as the message it came
from: [topic, partition, offset, timestamp_ms, key, value], its bytes exactly as they arrived
(topic null: fed without one, the event re-encoded as JSON stands for the value; so does it for
the ingest stage's events, whose messages carry none). State and held events are msgpack (the
state's dict keys keep their type; the bytes stay bytes), encoded in C in one call each: at a
large cluster's rate the detector holds tens of thousands of events, and listing them one by one
in Python plus the state as JSON took more than the whole loop's budget allows
(docs/streams.md, "A leaner hot path"). Held events are listed by bucket of event time, each in
arrival order: a held event's index is its `seq`, so sorting by (ts, seq) is the order of release.
Nothing is compressed here: the producer compresses (lz4) on
librdkafka's own thread.

Formats 2 to 4 had the state as JSON and, in the first line, one flat list per held event (its
seq, topic, partition, offset, timestamp_ms, key length (-1: no key) and value length), the
keys and values back to back after the state. Format 3 is format 2 whose state carries the
escalation's `job_errors` and each pending clue's signature; format 4 is format 3 whose jobs carry
their own hang floor (`hang_floor_s`). Older formats are upgraded when read
(`UPCASTERS`); a newer one is refused (`NewerCheckpoint`): a rollback must not overwrite what
it cannot read. A checkpoint names its owner, the deployment's topic prefix and telemetry
topics; a detector never resumes another's (`foreign`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from trainmedic.bus.message import RawMessage
from trainmedic.schemas import encode
from trainmedic.schemas.wire import decode_telemetry
from trainmedic.streams.core import Detector, DetectorState
from trainmedic.streams.live import Held, LiveDetector

VERSION = 9
# formats 2-4, per held event in the head's list: seq, topic, partition, offset, timestamp_ms, key, value
HELD_FIELDS = 7
SAVE_SHARE = 0.1  # at most this share of the time goes to checkpoints of a large state
Offsets = dict[tuple[str, int], int]  # (topic, partition) -> next offset to read


class CheckpointError(ValueError):
    """A checkpoint this version cannot read."""


class NewerCheckpoint(CheckpointError):
    """A checkpoint written by a newer trainmedic (a rollback): not to be overwritten blindly."""


@dataclass(frozen=True)
class Owner:
    """Whose checkpoint it is: the deployment's topic prefix and the telemetry topics it reads."""

    prefix: str
    topics: tuple[str, ...]


@dataclass(frozen=True)
class Checkpoint:
    owner: Owner | None  # None: written before checkpoints named one (format 1)
    offsets: Offsets
    state: DetectorState
    watermark: float
    held: list[Held]  # each with its message (or None: fed without one)
    sources: dict[tuple, tuple[float, float]]  # (topic, partition) -> (newest ts, quiet for s)

    def restore(self, live: LiveDetector, wall: float) -> None:
        """Carry `live` on from here (its config stays): the same state, the same held events."""
        live.detector = Detector(live.detector.config, self.state, live.detector.placed)
        live.resume(self.watermark, self.held, self.sources, wall)


def foreign(checkpoint: Checkpoint, owner: Owner) -> str | None:
    """Why `checkpoint` is not `owner`'s to resume (another prefix, other topics), or None."""
    if checkpoint.owner is not None and checkpoint.owner != owner:
        return (f"it belongs to topic prefix {checkpoint.owner.prefix!r} "
                f"(topics {', '.join(checkpoint.owner.topics)})")
    other = sorted({topic for topic, _ in checkpoint.offsets} - set(owner.topics))
    return f"it read topics {', '.join(other)}" if other else None


# A held event in a checkpoint: its message's fields, as `RawMessage` has them and encodes them
# (topic None: fed without one; the event's JSON as the value where the message kept none).
HeldRow = tuple[str | None, int | None, int | None, int | None, bytes | None, bytes]

_msgpack = msgspec.msgpack.Encoder()
_held_decoder = msgspec.msgpack.Decoder(list[HeldRow])


def encode_checkpoint(live: LiveDetector, offsets: Offsets, wall: float, owner: Owner | None = None,
                      rewind: bool = False) -> bytes:
    """`live` and the `offsets` its events were read up to, now (`wall`): one checkpoint of `owner`.

    `rewind`: where `offsets` are those of the partitions the events came from (a whole detector's,
    Faust's; the decider's source offsets, with its events topic's already rewound), the events
    waiting unfed (`LiveConfig.order_at`) are left to Kafka: their partition's offset goes back to
    the first of them, and a restart reads them again. (A backlog's may be hundreds of thousands:
    kept, they took the checkpoint over its limit.) Without it they are saved with the held ones."""
    entries, offsets = live.held_entries(waiting=False), dict(offsets)
    for source, waiting in live.waiting_entries().items():
        first = waiting[0][2]
        if rewind and first is not None and first.where == source and source in offsets:
            offsets[source] = min(offsets[source], first.offset)
        else:
            entries += waiting
    held = [origin if origin is not None and origin.value is not None else _stand_in(event, origin)
            for _, event, origin in entries]  # a RawMessage encodes as a HeldRow
    state = live.detector.state.to_msgpack()
    head = json.dumps({
        "v": VERSION,
        "owner": None if owner is None else {"prefix": owner.prefix, "topics": list(owner.topics)},
        "offsets": [[topic, partition, offset] for (topic, partition), offset in sorted(offsets.items())],
        "watermark": live.watermark if math.isfinite(live.watermark) else None,
        "sources": [[*source, max_ts, quiet_s] for source, (max_ts, quiet_s) in live.sources(wall).items()],
        "state": len(state),
        "held": len(held),
    }, separators=(",", ":")).encode()
    return b"".join([head, b"\n", state, _msgpack.encode(held)])


def _stand_in(event: object, origin: RawMessage | None) -> HeldRow:
    """A held event without its message's bytes: fed without a message, or from the ingest stage
    (streams/engines/batches.py). The event re-encoded stands for the value."""
    if origin is None:
        return (None, None, None, None, None, encode(event))
    return (origin.topic, origin.partition, origin.offset, origin.timestamp_ms, origin.key, encode(event))


def _v1_to_v2(head: dict, body: bytes) -> tuple[dict, bytes]:
    """Format 1 (before 2): per held event seq, topic, partition, offset, key as text, value length;
    no keys in the body and no broker timestamps (-1 here: not known)."""
    at = head["state"]
    parts, flat = [body[:at]], []
    old = head["held"]
    for i in range(0, len(old), 6):
        seq, topic, partition, offset, key, length = old[i:i + 6]
        raw_key = None if key is None else key.encode()
        flat += [seq, topic, partition, offset, None if topic is None else -1,
                 -1 if raw_key is None else len(raw_key), length]
        parts += [raw_key or b"", body[at:at + length]]
        at += length
    parts.append(body[at:])  # whatever follows is left for the reader to refuse
    return {**head, "v": 2, "held": flat}, b"".join(parts)


def _v2_to_v3(head: dict, body: bytes) -> tuple[dict, bytes]:
    """Format 2 (before 3): the state had no `job_errors` (each job's recent failure signatures)
    and a clue no signature. Empty ones: a failure before the upgrade is never a repeat."""
    at = head["state"]
    state = json.loads(body[:at])
    state["job_errors"] = {}
    for job in state["jobs"].values():
        if job["group"] is not None:
            job["group"]["best"].append("")
    raw = json.dumps(state, separators=(",", ":")).encode()
    return {**head, "v": 3, "state": len(raw)}, raw + body[at:]


def _v3_to_v4(head: dict, body: bytes) -> tuple[dict, bytes]:
    """Format 3 (before 4): a job had no `hang_floor_s`. None: the config's floor, as before."""
    at = head["state"]
    state = json.loads(body[:at])
    for job in state["jobs"].values():
        job["hang_floor_s"] = None
    raw = json.dumps(state, separators=(",", ":")).encode()
    return {**head, "v": 4, "state": len(raw)}, raw + body[at:]


def _v4_to_v5(head: dict, body: bytes) -> tuple[dict, bytes]:
    """Format 4 (before 5): the state as JSON, the held events in the head's flat list (in no order:
    seq orders those of equal ts) with their keys and values after the state."""
    at = head["state"]
    state = _msgpack.encode(json.loads(body[:at]))
    held, flat = [], head["held"]
    for i in range(0, len(flat), HELD_FIELDS):
        seq, topic, partition, offset, timestamp_ms, key_length, length = flat[i:i + HELD_FIELDS]
        key = None
        if key_length >= 0:
            key = body[at:at + key_length]
            at += key_length
        held.append((seq, (topic, partition, offset, timestamp_ms, key, body[at:at + length])))
        at += length
    if at != len(body):
        raise ValueError(f"{len(body) - at} bytes past the last held event")
    held.sort(key=lambda item: item[0])
    return ({**head, "v": 5, "state": len(state), "held": len(held)},
            state + _msgpack.encode([row for _, row in held]))


def _v5_to_v6(head: dict, body: bytes) -> tuple[dict, bytes]:
    """Format 5 (before 6): a job had no `first_step_ts` and an incident no `steps` or
    `stepping_since`; their defaults (None: not known) decode it. A detector of format 5 refuses
    format 6 as newer instead of failing on the fields it does not know."""
    return {**head, "v": 6}, body


def _v6_to_v7(head: dict, body: bytes) -> tuple[dict, bytes]:
    """Format 6 (before 7): the state remembered no ended job and no rank's failed exit; their
    defaults (none ended, none exited) decode it. A detector of format 6 refuses format 7 as newer."""
    return {**head, "v": 7}, body


def _v7_to_v8(head: dict, body: bytes) -> tuple[dict, bytes]:
    """Format 7 (before 8): the state counted no incidents against the limits (`rates`), had no
    `storms` and no suppressed incident; their defaults (nothing counted) decode it. A detector of
    format 7 refuses format 8 as newer."""
    return {**head, "v": 8}, body


def _v8_to_v9(head: dict, body: bytes) -> tuple[dict, bytes]:
    """Format 8 (before 9): a job had no `placed` nodes; its default (None: placement not known, every
    node's reports of its generation used until its next one) decodes it. A detector of format 8
    refuses format 9 as newer."""
    return {**head, "v": 9}, body


# Format n -> n + 1, applied in turn until the format is VERSION.
UPCASTERS: dict[int, Callable[[dict, bytes], tuple[dict, bytes]]] = {
    1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4, 4: _v4_to_v5, 5: _v5_to_v6, 6: _v6_to_v7, 7: _v7_to_v8,
    8: _v8_to_v9,
}


def decode_checkpoint(data: bytes) -> Checkpoint:
    """Raises CheckpointError (NewerCheckpoint for a newer format) for anything it cannot use."""
    try:
        line, _, body = data.partition(b"\n")
        head = json.loads(line)
        version = head.get("v")
    except (ValueError, AttributeError) as err:
        raise CheckpointError(f"not a detector checkpoint: {err}") from None
    if type(version) is int and version > VERSION:
        raise NewerCheckpoint(f"checkpoint format {version} was written by a newer trainmedic "
                              f"(this one reads up to {VERSION})")
    if type(version) is not int or (version != VERSION and version not in UPCASTERS):
        raise CheckpointError(f"checkpoint format {version!r}; this detector reads 1 to {VERSION}")
    try:
        while head["v"] != VERSION:
            head, body = UPCASTERS[head["v"]](head, body)
        return _decode(head, body)
    except Exception as err:  # whatever a damaged or foreign checkpoint makes the decoding raise
        raise CheckpointError(f"checkpoint unreadable: {type(err).__name__}: {err}") from None


def _decode(head: dict, body: bytes) -> Checkpoint:
    at = head["state"]
    state = DetectorState.from_dict(msgspec.msgpack.decode(body[:at]))
    rows = _held_decoder.decode(body[at:])
    if len(rows) != head["held"]:
        raise ValueError(f"{len(rows)} held events, the head says {head['held']}")
    held = [Held(decode_telemetry(row[5]), None if row[0] is None else RawMessage(*row), seq)
            for seq, row in enumerate(rows)]
    watermark = head["watermark"]
    owner = head.get("owner")
    return Checkpoint(
        owner=None if owner is None else Owner(owner["prefix"], tuple(owner["topics"])),
        offsets={(topic, partition): offset for topic, partition, offset in head["offsets"]},
        state=state,
        watermark=float("-inf") if watermark is None else watermark,
        held=held,
        sources={(topic, partition): (max_ts, quiet_s)
                 for topic, partition, max_ts, quiet_s in head["sources"]},
    )


@dataclass
class Cadence:
    """When to save: event time moved and the last save is `every_s` old. `every_s` grows with
    the cost of a save, so that saving a large state takes at most SAVE_SHARE of the time."""

    base_every_s: float = 1.0
    every_s: float = 0.0
    _clock: float | None = None
    _at: float = float("-inf")

    def __post_init__(self) -> None:
        self.every_s = self.base_every_s

    def due(self, clock: float, now: float) -> bool:
        return clock != self._clock and now - self._at >= self.every_s

    def saved(self, clock: float, now: float, cost_s: float) -> None:
        self._clock, self._at = clock, now
        self.every_s = max(self.base_every_s, cost_s / SAVE_SHARE)

    def postponed(self, now: float) -> None:
        """Not saved this time (e.g. the broker is away): try again later, twice as long each time
        (up to a minute), so that waiting for the broker does not stall the caller's loop."""
        self._at = now
        self.every_s = min(60.0, self.every_s * 2)
