"""The incidents topic read back as a story: a pure fold, views of each incident, a CLI
(docs/coordinator.md)."""

from trainmedic.ops.incidents.fold import IncidentHistory, fold
from trainmedic.ops.incidents.views import Entry, IncidentView, timeline, views

__all__ = ["Entry", "IncidentHistory", "IncidentView", "fold", "timeline", "views"]
