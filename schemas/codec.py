"""JSON on the wire: one UTF-8 JSON object per message value. Never pickle."""

from __future__ import annotations

from typing import Any

import msgspec
from pydantic import BaseModel, TypeAdapter, ValidationError

from trainmedic.schemas.telemetry import Telemetry


class InvalidEvent(ValueError):
    """A value that is not a valid event; the message says why, in one line."""


def encode(event: BaseModel | msgspec.Struct) -> bytes:
    """A contract model, or its fast twin (schemas/wire.py), as JSON."""
    if isinstance(event, msgspec.Struct):
        return _struct_json.encode(event)
    return event.model_dump_json(exclude_none=False).encode("utf-8")


_struct_json = msgspec.json.Encoder()


def decode(raw: bytes | str | None, validator: TypeAdapter) -> Any:
    """Validate one message value; raise InvalidEvent with a one-line reason, nothing else."""
    if raw is None:
        raise InvalidEvent("empty value (null)")
    try:
        return validator.validate_json(raw)
    except ValidationError as err:
        raise InvalidEvent(_one_line(err)) from None
    except (ValueError, TypeError) as err:  # e.g. undecodable bytes inside pydantic-core
        raise InvalidEvent(f"not a JSON object: {err}") from None


def _one_line(err: ValidationError) -> str:
    parts = []
    for item in err.errors(include_url=False)[:5]:
        where = ".".join(str(p) for p in item["loc"]) or "value"
        parts.append(f"{where}: {item['msg']}")
    more = err.error_count() - len(parts)
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


TELEMETRY = TypeAdapter(Telemetry)


def decode_telemetry(raw: bytes | str) -> Any:
    """Any telemetry event, whatever its topic (replay files mix them)."""
    return decode(raw, TELEMETRY)
