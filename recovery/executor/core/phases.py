"""The phases of a recovery an executor sees for each rank it launched: its rendezvous (launch → its
`worker_start`), its restore (the seconds its first step says the restore took) and its first step
(`worker_start` → that step) (docs/metrics.md, `trainmedic_recovery_phase_seconds`). Pure: times passed in."""

from __future__ import annotations

from dataclasses import dataclass

from trainmedic.schemas.telemetry import WorkerStarted, WorkerStepped


@dataclass(slots=True)
class RankTimes:
    """When this executor launched one rank, and when it heard the rank join its process group."""

    launched: float
    joined: float | None = None
    stepped: bool = False


def rank_phases(times: RankTimes, report: object, now: float) -> list[tuple[str, float]]:
    """The phases `report` ends for its rank, as (phase, seconds); updates `times`."""
    if isinstance(report, WorkerStarted) and times.joined is None:
        times.joined = now
        return [("rendezvous", max(0.0, now - times.launched))]
    if isinstance(report, WorkerStepped) and times.joined is not None and not times.stepped:
        times.stepped = True
        restored = [] if report.restored is None else [("restore", report.restored.seconds)]
        return [*restored, ("first_step", max(0.0, now - times.joined))]
    return []
