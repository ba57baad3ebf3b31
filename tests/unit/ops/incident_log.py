"""A recorded incident log from the real coordinator core: the detector's incidents (topic
incidents) plus the coordinator's lifecycle events (topic recovery), with what a reader must
make of them."""

from __future__ import annotations

from tests.unit.coordinator.world import Recorder, incident, of_type
from trainmedic.schemas import IncidentStatus

INCIDENT_LOG_TYPES = {"incident", "recovery_planned", "recovery_completed", "recovery_failed",
                      "recovery_skipped"}


def placed() -> list[tuple[tuple[str, str], object]]:
    """A SEV3 retried and resolved; a SEV2 whose restart fails and escalates; a SEV1; a WARN: each
    event with the (topic suffix, key) its writer gives it."""
    rec = Recorder()
    rec.started(now=1.0)
    sev3 = incident("net-1", "SEV3", node="n1", ts=20.0)
    sev3 = sev3.model_copy(update={"category": "network", "evidence": ("rank 3: connection reset by peer",)})
    rec.ack(rec.feed(sev3, now=20.0), "done", now=21.0)
    out = rec.feed(incident("hang-2", "SEV2", node="n2", ts=30.0), now=30.0)
    rec.ack(out, "accepted", now=31.0)
    out = rec.ack(of_type(out, "command")[:1], "failed", now=32.0, reason="exit 1")  # escalates
    rec.ack([c for c in of_type(out, "command") if c.node != "n4"], "done", now=33.0)
    rec.feed(incident("xid-3", "SEV1", node="n3", ts=60.0), now=60.0)
    rec.feed(incident("warm-4", "WARN", node="n1", ts=61.0), now=61.0)
    resolved = sev3.model_copy(update={"status": IncidentStatus.RESOLVED, "ts": 62.0,
                                       "evidence": (*sev3.evidence, "62.000 resolved: steps resumed")})
    rec.feed(resolved, now=62.0)
    return [(where, e) for where, e in rec.placed() if e.type in INCIDENT_LOG_TYPES]


def recorded() -> list:
    """The events of `placed()`, in order."""
    return [e for _, e in placed()]
