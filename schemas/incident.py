"""The detector's decision (EVENTS.md, "Decisions"): one incident per fault."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from schemas.base import Event


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
    id: str = Field(min_length=1)
    status: IncidentStatus
    category: str = Field(min_length=1)
    severity: Severity
    action: Action
    job: str | None = None
    node: str | None = None
    ranks: tuple[int, ...] = ()
    first_ts: float
    evidence: tuple[str, ...] = ()
