"""Telemetry decoded fast: msgspec Structs for the six telemetry events, the detector's hot path, derived
at import from the pydantic contract (`schemas/telemetry.py`) with the same fields and bounds
(`schemas/twins.py`); the detection core takes either (docs/streams.md, "A leaner hot path (issue 18)").
"""

from __future__ import annotations

import operator
from functools import reduce
from typing import Any

import msgspec
from msgspec import Struct

from trainmedic.schemas import telemetry
from trainmedic.schemas.codec import TELEMETRY, decode
from trainmedic.schemas.twins import derive

# contract model -> its Struct, and the same Struct's trusted twin: the same event decoded without the
# contract's bounds, ~35% faster, for values a validating reader already checked
# (`streams/engines/batches.py`).
STRUCTS = derive(telemetry.Telemetry, __name__)
TRUSTED: dict[type, type] = {STRUCTS[model]: twin
                             for model, twin in derive(telemetry.Telemetry, __name__, STRUCTS).items()}

GpuSample = STRUCTS[telemetry.GpuSample]
LinkState = STRUCTS[telemetry.LinkState]
NodeHeartbeat = STRUCTS[telemetry.NodeHeartbeat]
WorkerStarted = STRUCTS[telemetry.WorkerStarted]
Restored = STRUCTS[telemetry.Restored]
WorkerStepped = STRUCTS[telemetry.WorkerStepped]
WorkerFailed = STRUCTS[telemetry.WorkerFailed]
WorkerExited = STRUCTS[telemetry.WorkerExited]

KINDS: tuple[type, ...] = (GpuSample, NodeHeartbeat, WorkerStarted, WorkerStepped, WorkerFailed, WorkerExited)
Telemetry = reduce(operator.or_, KINDS)
TrustedTelemetry = reduce(operator.or_, (TRUSTED[kind] for kind in KINDS))

# Any telemetry event, as the contract bounds it (`decode_telemetry` is the whole of the check).
fast_decoder = msgspec.json.Decoder(Telemetry)


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
