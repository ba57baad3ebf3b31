"""Telemetry decoded fast: msgspec Structs for the six telemetry events, the detector's hot path, mirroring
the pydantic contract (`schemas/telemetry.py`) field by field with the same bounds; the detection core
takes either (docs/streams.md, "A leaner hot path (issue 18)").
"""

from __future__ import annotations

import operator
from functools import reduce
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec
from msgspec import Meta, Struct

from trainmedic.schemas.bounds import MAX_FLOPS, MAX_ID, MAX_INT, MAX_NAME, MAX_SMALL_ITEMS, MAX_TEXT, MAX_TS
from trainmedic.schemas.codec import TELEMETRY, decode

# Python's `$` also matches before a final newline: `\Z` is the end that pydantic's `$` means.
NAME_PATTERN = r"^[A-Za-z0-9._:\-]+\Z"

Timestamp = Annotated[float, Meta(ge=0, le=MAX_TS)]
Seconds = Timestamp
Finite = Annotated[float, Meta(ge=-MAX_FLOPS, le=MAX_FLOPS)]
Count = Annotated[int, Meta(ge=0, le=MAX_INT)]
Int64 = Annotated[int, Meta(ge=-MAX_INT - 1, le=MAX_INT)]
Version = Annotated[int, Meta(ge=1, le=MAX_INT)]
WorldSize = Annotated[int, Meta(ge=1, le=MAX_INT)]
Interval = Annotated[float, Meta(gt=0, le=MAX_TS)]
Name = Annotated[str, Meta(min_length=1, max_length=MAX_NAME, pattern=NAME_PATTERN)]
Id = Annotated[str, Meta(min_length=1, max_length=MAX_ID, pattern=r"^[^\x00]+\Z")]
Short = Annotated[str, Meta(max_length=MAX_ID)]
Text = Annotated[str, Meta(max_length=MAX_TEXT)]


class _Event(Struct, frozen=True, tag_field="type", kw_only=True, forbid_unknown_fields=True):
    ts: Timestamp
    node: Name
    v: Version = 1


class GpuSample(_Event, frozen=True, kw_only=True, tag="gpu_sample"):
    gpu: Count
    uuid: Short | None = None
    util: Finite | None = None
    mem_used_mb: Finite | None = None
    mem_total_mb: Finite | None = None
    temp_c: Finite | None = None
    power_w: Finite | None = None
    ecc_sbe: Count | None = None
    ecc_dbe: Count | None = None
    nvlink_errors: Count | None = None
    xids: Annotated[tuple[Int64, ...], Meta(max_length=MAX_SMALL_ITEMS)] = ()
    throttle: Annotated[tuple[Short, ...], Meta(max_length=MAX_SMALL_ITEMS)] = ()


class LinkState(Struct, frozen=True, forbid_unknown_fields=True):
    name: Name
    up: bool


class NodeHeartbeat(_Event, frozen=True, kw_only=True, tag="node_heartbeat"):
    interval: Interval
    links: Annotated[tuple[LinkState, ...], Meta(max_length=MAX_SMALL_ITEMS)] = ()
    leaving: bool = False


class _Worker(_Event, frozen=True, kw_only=True):
    job: Id
    rank: Count
    world_size: WorldSize
    generation: Count = 0
    pid: Int64 | None = None


class WorkerStarted(_Worker, frozen=True, kw_only=True, tag="worker_start"):
    hang_floor_s: Seconds | None = None


class Restored(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    kind: Literal["replica", "checkpoint"]
    step: Count
    seconds: Seconds
    read: Count | None = None
    received: Count | None = None


class WorkerStepped(_Worker, frozen=True, kw_only=True, tag="worker_step"):
    step: Count
    step_time: Seconds
    restore_warning: Text | None = None
    restored: Restored | None = None


class WorkerFailed(_Worker, frozen=True, kw_only=True, tag="worker_error"):
    error: Text
    traceback: Text | None = None


class WorkerExited(_Worker, frozen=True, kw_only=True, tag="worker_exit"):
    exit_code: Int64 | None = None
    signal: Int64 | None = None
    reason: Text | None = None
    stopped: bool = False
    output_tail: Text | None = None

    @property
    def status_unknown(self) -> bool:
        return self.exit_code is None and self.signal is None and self.reason is not None


Telemetry = GpuSample | NodeHeartbeat | WorkerStarted | WorkerStepped | WorkerFailed | WorkerExited
KINDS: tuple[type, ...] = (GpuSample, NodeHeartbeat, WorkerStarted, WorkerStepped, WorkerFailed, WorkerExited)

# Any telemetry event, as the contract bounds it (`decode_telemetry` is the whole of the check).
fast_decoder = msgspec.json.Decoder(Telemetry)


def _unbounded(annotation: Any, twins: dict[type, type]) -> Any:
    """The type without its bounds (`Annotated[..., Meta(...)]` taken off, nested Structs twinned)."""
    if get_origin(annotation) is Annotated:
        return _unbounded(get_args(annotation)[0], twins)
    args = get_args(annotation)
    if not args:
        return twins.get(annotation, annotation)
    inner = tuple(a if a is Ellipsis else _unbounded(a, twins) for a in args)
    if isinstance(annotation, UnionType) or get_origin(annotation) is Union:
        return reduce(operator.or_, inner)
    return get_origin(annotation)[inner]


def _trusted(kind: type, twins: dict[type, type]) -> type:
    """A subclass of `kind` with the same fields minus their bounds, decoded ~35% faster: for values a
    validating reader already checked (`streams/engines/batches.py`)."""
    fields = []
    for f in msgspec.structs.fields(kind):
        default = f.default
        if f.default_factory is not msgspec.NODEFAULT:
            default = msgspec.field(default_factory=f.default_factory)
        annotation = _unbounded(f.type, twins)
        fields.append((f.name, annotation) if default is msgspec.NODEFAULT else (f.name, annotation, default))
    config = kind.__struct_config__
    return msgspec.defstruct(f"Trusted{kind.__name__}", fields, bases=(kind,), kw_only=True, frozen=True,
                             tag_field=config.tag_field, tag=config.tag, module=__name__)


# kind -> its trusted twin: the same event, decoded without the contract's bounds.
TRUSTED: dict[type, type] = {}
for _kind in (LinkState, Restored, *KINDS):
    TRUSTED[_kind] = _trusted(_kind, TRUSTED)
TrustedTelemetry = reduce(operator.or_, (TRUSTED[kind] for kind in KINDS))


def decode_telemetry(raw: bytes | str | None) -> Any:
    """Any telemetry event: a Struct when msgspec takes it, else what the contract model decides
    (the model, or InvalidEvent with pydantic's reason). Only ASCII takes the fast path: msgspec
    does not check the UTF-8 of keys it skips, pydantic refuses invalid UTF-8 anywhere.

    msgspec is strict where pydantic is lax (`"5"` for an int, `1.0` for a count, `"true"` for a
    bool), so such a value is still accepted, as the contract model, and a refusal always carries
    pydantic's reason. A field the contract does not know is pydantic's to judge too (msgspec would
    skip it without the contract's limits: nesting deeper than 200, integers longer than 4,300
    digits); producers send none, so the fast path keeps telemetry as it is produced.
    tests/unit/schemas/test_wire.py checks that whatever msgspec accepts pydantic accepts with the
    same values."""
    if raw is not None and raw.isascii():
        try:
            return fast_decoder.decode(raw)
        except Exception:  # any refusal (not JSON, not valid, nested too deep: RecursionError)
            pass
    return decode(raw, TELEMETRY)


def retimed(event: Any, ts: float) -> Any:
    """The event at another time, whichever kind it is."""
    if isinstance(event, Struct):
        return msgspec.structs.replace(event, ts=ts)
    return event.model_copy(update={"ts": ts})
