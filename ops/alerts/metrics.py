"""The alert bridge's metrics (docs/metrics.md)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

ALERTS_DELIVERED = Counter("trainmedic_alerts_delivered", "Incident events a sink accepted", ["sink"])
ALERTS_REJECTED = Counter("trainmedic_alerts_rejected",
                          "Incident events a sink refused as malformed (4xx), not retried", ["sink"])
ALERT_RETRIES = Counter("trainmedic_alert_retries", "Failed attempts that will be retried", ["sink"])
ALERT_BACKLOG = Gauge("trainmedic_alert_backlog", "Incident events waiting for delivery to a sink", ["sink"])
OPEN_INCIDENTS = Gauge("trainmedic_open_incidents", "Incidents open in the log, by severity", ["severity"])
ALERTS_HELD = Counter("trainmedic_alerts_held", "Incident events not posted: their node's or job's posts "
                      "reached posts_per_node or posts_per_job in the window (one summary says how many)",
                      ["scope"])
