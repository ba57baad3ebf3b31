"""The incidents topic read back as a story: a pure fold, views of each incident, a CLI."""

from ops.incident_log.fold import IncidentHistory, fold
from ops.incident_log.views import Entry, IncidentView, timeline, views

__all__ = ["Entry", "IncidentHistory", "IncidentView", "fold", "timeline", "views"]
