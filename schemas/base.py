"""The parts every event shares: the envelope fields and the model configuration."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from trainmedic.schemas.bounds import MAX_ID, MAX_INT, MAX_TEXT, Name, Timestamp

CONTRACT_VERSION = 1


class Model(BaseModel):
    """Frozen, and tolerant of fields it does not know (they are kept, never rejected). Numbers are
    finite and strings bounded (`schemas/bounds.py`)."""

    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True, allow_inf_nan=False,
                              str_max_length=MAX_TEXT)


class Event(Model):
    """An event on the bus: `type` is the discriminator, `ts` its event time (Unix s, UTC)."""

    v: int = Field(default=CONTRACT_VERSION, ge=1, le=MAX_INT)
    ts: Timestamp


class NodeEvent(Event):
    """An event about one host."""

    node: Name


class Signed(Model):
    """Signed by who wrote it: `signature` is Ed25519 (base64) by the key named `key_id` over the
    record's canonical JSON without these two fields (recovery/signing.py); both absent when
    unsigned. `deployment` (signed with the rest) is the topic prefix it was written for, so a
    signature never counts under another prefix. Commands and the coordinator's decisions are
    signed by the coordinator, job submissions and node-lifecycle events by an operator, acks by
    their node."""

    signature: str | None = Field(default=None, max_length=MAX_ID)
    key_id: str | None = Field(default=None, max_length=MAX_ID)
    deployment: str | None = Field(default=None, max_length=MAX_ID)
