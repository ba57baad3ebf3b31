"""The producers' metrics: GPU producer, host agent and training hook (docs/metrics.md)."""

from __future__ import annotations

from prometheus_client import Counter

EVENTS_SENT = Counter("trainmedic_producer_events_sent", "Telemetry events queued for Kafka", ["what"])
EVENTS_DROPPED = Counter("trainmedic_producer_events_dropped",
                         "Telemetry events dropped rather than waiting for Kafka", ["what"])
