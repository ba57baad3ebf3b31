"""The incidents topic read back as a story: a pure fold, views of each incident, a CLI."""

from ops.incident_log.fold import IncidentLog, fold
from ops.incident_log.views import Entry, IncidentView, timeline, views

__all__ = ["Entry", "IncidentLog", "IncidentView", "fold", "timeline", "views"]
