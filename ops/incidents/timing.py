"""Timing recoveries while they happen (`trainmedic run`, the demo): the incident fold of what is read,
without the steps that neither start a generation nor report a restore, so that a long job's memory
stays flat. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainmedic.ops.incidents.fold import IncidentHistory, apply
from trainmedic.ops.incidents.phases import Phase
from trainmedic.ops.incidents.views import IncidentView, views
from trainmedic.schemas.telemetry import WorkerStepped


@dataclass
class RecoveryTimer:
    history: IncidentHistory = field(default_factory=IncidentHistory)

    def apply(self, event: object, published: float | None = None) -> None:
        """Fold `event` (`published`: its Kafka message time) unless it is a step that times nothing."""
        if (isinstance(event, WorkerStepped) and (event.job, event.generation) in self.history.steps
                and event.restored is None and not event.restore_warning):
            return
        apply(self.history, event, published)

    def timed(self, job: str) -> list[tuple[IncidentView, tuple[Phase, ...]]]:
        """Each incident `job` recovered from and stepped again after, with its phases."""
        return [(view, found) for view in views(self.history) for name, found in view.phases
                if name == job and found]
