"""The detector's decision (EVENTS.md, "Decisions"): one incident per fault."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from trainmedic.schemas.base import Event
from trainmedic.schemas.bounds import MAX_ITEMS, MAX_SMALL_ITEMS, Count, Id, Name, Text, Timestamp


class Severity(StrEnum):
    """Three failure levels of the Unicron design, plus WARN. SEV1 is the most severe."""

    SEV1 = "SEV1"
    SEV2 = "SEV2"
    SEV3 = "SEV3"
    WARN = "WARN"


class Action(StrEnum):
    """The cheapest action that is enough for a severity (TAXONOMY.md)."""

    RECONFIGURE = "reconfigure"
    RESTART = "restart"
    REATTEMPT = "reattempt"
    ALERT = "alert"


class IncidentStatus(StrEnum):
    OPEN = "open"
    RESOLVED = "resolved"


class Incident(Event):
    """A detected fault, opened or resolved. `ts - first_ts` is the detection delay."""

    type: Literal["incident"] = "incident"
    id: Id
    status: IncidentStatus
    category: Id
    severity: Severity
    action: Action
    job: Id | None = None
    node: Name | None = None
    ranks: tuple[Count, ...] = Field(default=(), max_length=MAX_ITEMS)
    first_ts: Timestamp
    evidence: tuple[Text, ...] = Field(default=(), max_length=MAX_SMALL_ITEMS)
