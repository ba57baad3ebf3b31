"""The detector's decision (EVENTS.md, "Decisions"): one incident per fault."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from trainmedic.schemas.base import Event, Model
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


class Progress(Model):
    """How far the failing generation of a job got: `steps` it completed, the first of them at
    `since` (event time; None when it completed none). The job ran healthily from `since` until the
    incident's `first_ts`."""

    steps: Count
    since: Timestamp | None = None


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
    progress: Progress | None = Field(default=None, description="a job's failure: how far the generation "
                                      "that failed got. The coordinator gives a job that never completed "
                                      "a step one retry, and one that ran healthily long enough its "
                                      "restart budget back; absent (older detectors, a node's fault): "
                                      "every restart counts")
