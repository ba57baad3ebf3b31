"""The parts every event shares: the envelope fields and the model configuration."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, field_validator

CONTRACT_VERSION = 1


class Model(BaseModel):
    """Frozen, and tolerant of fields it does not know (they are kept, never rejected)."""

    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)


class Event(Model):
    """An event on the bus: `type` is the discriminator, `ts` its event time (Unix s, UTC)."""

    v: int = Field(default=CONTRACT_VERSION, ge=1)
    ts: float

    @field_validator("ts")
    @classmethod
    def _finite(cls, ts: float) -> float:
        if not math.isfinite(ts) or ts < 0:
            raise ValueError("ts must be a finite, non-negative Unix time in seconds")
        return ts


class NodeEvent(Event):
    """An event about one host."""

    node: str = Field(min_length=1)
