"""What the alert bridge sent (topic `alerts`, key incident id): one record per incident event and sink."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from trainmedic.schemas.base import Event
from trainmedic.schemas.bounds import MAX_ID, Id, Text
from trainmedic.schemas.incident import IncidentStatus, Severity


class AlertDelivered(Event):
    """An incident event forwarded to one sink, and how it ended: delivered, or rejected by the
    endpoint as malformed (never retried). `payload` is what was posted, secrets removed."""

    type: Literal["alert_delivered"] = "alert_delivered"
    incident_id: Id
    status: IncidentStatus
    severity: Severity
    sink: str = Field(min_length=1, max_length=MAX_ID)
    outcome: Literal["delivered", "rejected"]
    attempts: int = Field(ge=1)
    detail: Text | None = None
    payload: Any = None
