"""The detector's metrics (docs/metrics.md)."""

from __future__ import annotations

import weakref

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily

from trainmedic.schemas.incident import Severity
from trainmedic.streams.core.taxonomy import CATEGORIES

_DELAY_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)

DETECTOR_EVENTS = Counter("trainmedic_detector_events", "Telemetry events the detector decided on")
INCIDENTS = Counter("trainmedic_incidents", "Incident events published (opened, resolved)",
                    ["category", "severity", "status"])
UNVERIFIED = Counter("trainmedic_detector_unverified",
                     "Telemetry records refused because they do not carry the MAC of the node they name "
                     "(bus/telemetry_keys.py): written without a node key, or with another node's")
CLOCK_SKEWED = Counter("trainmedic_detector_clock_skewed",
                       "Events whose ts was out of bounds (streams/event_time.py): ahead of their message's "
                       "broker timestamp or the detector's clock by more than max_ahead_s (dead-lettered, "
                       "not used), or behind their timestamp by more than max_skew_s (dead-lettered, used "
                       "at the timestamp)", ["direction"])
PAUSED_PARTITIONS = Gauge("trainmedic_detector_paused_partitions",
                          "Partitions the detector does not read now: too many events held, it reads those "
                          "behind in event time first (streams/engines/backpressure.py)")
DETECTION_DELAY = Histogram("trainmedic_detection_delay_seconds",
                            "Event time from an incident's earliest evidence to its opening (ts - first_ts)",
                            ["severity"], buckets=_DELAY_BUCKETS)

# Every severity, and every category's opening at its severity, from the start at 0: the first
# incident after a scrape counts as an increase, so the rates and the delay quantiles have data (a
# series born at 1 has no rate).
for _severity in Severity:
    DETECTION_DELAY.labels(str(_severity))
for _category in CATEGORIES.values():
    INCIDENTS.labels(_category.name, str(_category.severity), "open")


def observe_incident(incident) -> None:
    """Count one published incident event; an opening also records its detection delay."""
    INCIDENTS.labels(incident.category, str(incident.severity), str(incident.status)).inc()
    if incident.status == "open":
        DETECTION_DELAY.labels(str(incident.severity)).observe(max(0.0, incident.ts - incident.first_ts))


class CoreLimits:
    """What the core's limits held back (streams/core/limits.py), read from the live detectors watched
    when Prometheus scrapes: observed from outside, nothing counted in the hot path. A detector made
    anew (restored from a checkpoint) counts from 0 again, as a restarted process does."""

    def __init__(self) -> None:
        self._watched: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # LiveDetector: unhashable

    def watch(self, live) -> None:
        """Count what `live.detector` (whichever detector it holds then) holds back."""
        self._watched[id(live)] = live

    def collect(self):
        suppressed = CounterMetricFamily(
            "trainmedic_detector_incidents_suppressed", "Incidents from job reports a storm held back: "
            "never emitted (limits.node_incidents, limits.job_incidents per limits.window_s), by the scope "
            "whose limit held them (one held by its node and its job counts for both)", labels=["scope"])
        refused = CounterMetricFamily(
            "trainmedic_detector_job_reports_refused", "Worker reports not followed: their node follows "
            "limits.node_jobs jobs already")
        unplaced = CounterMetricFamily(
            "trainmedic_detector_unplaced", "Worker reports not used: their node holds no coordinator-"
            "signed placement of their job's generation (streams/core/placement.py); those that would "
            "have created or moved a job, or came from an unplaced node of a followed job, dead-lettered")
        counts = [live.detector.limited for live in list(self._watched.values())]
        for scope in ("node", "job"):
            suppressed.add_metric([scope], sum(c.suppressed[scope] for c in counts))
        refused.add_metric([], sum(c.refused for c in counts))
        unplaced.add_metric([], sum(c.unplaced for c in counts))
        yield suppressed
        yield refused
        yield unplaced


CORE_LIMITS = CoreLimits()
REGISTRY.register(CORE_LIMITS)
