"""Every Prometheus metric trainmedic exports, in one place, and how a service serves them.

Names start with `trainmedic_`; docs/metrics.md describes each, and the Grafana dashboard
(compose/grafana/dashboards/) may use only these. A service serves them when started with
`--metrics-port PORT` (off by default).
"""

from __future__ import annotations

import logging

from prometheus_client import Counter, Gauge, Histogram, start_http_server

log = logging.getLogger(__name__)

_DELAY_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)
_RESUME_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600)

# Detector
DETECTOR_EVENTS = Counter("trainmedic_detector_events", "Telemetry events the detector decided on")
INCIDENTS = Counter("trainmedic_incidents", "Incident events published (opened, resolved)",
                    ["category", "severity", "status"])
DETECTION_DELAY = Histogram("trainmedic_detection_delay_seconds",
                            "Event time from an incident's earliest evidence to its opening (ts - first_ts)",
                            ["severity"], buckets=_DELAY_BUCKETS)
# Every consumer
DEAD_LETTERS = Counter("trainmedic_dead_letters", "Messages sent to the dlq because they did not validate",
                       ["service"])
CONSUMER_LAG = Gauge("trainmedic_consumer_lag", "Messages a consumer group has not committed yet "
                     "(high watermark - committed offset), sampled every few seconds",
                     ["group", "topic", "partition"])
# Coordinator
RECOVERY_PLANS = Counter("trainmedic_recovery_plans", "Plans the coordinator issued, one per job", ["kind"])
RECOVERY_OUTCOMES = Counter("trainmedic_recovery_outcomes", "Plans that completed or failed, and incidents "
                            "the coordinator skipped", ["outcome"])
COMMANDS_SENT = Counter("trainmedic_commands_sent", "Commands sent, re-sends included", ["action"])
COMMAND_ACKS = Counter("trainmedic_command_acks", "Acks the coordinator received, by status", ["status"])
TIME_TO_RESUME = Histogram("trainmedic_time_to_resume_seconds",
                           "From an incident's earliest evidence to its recovery plan completed",
                           ["kind"], buckets=_RESUME_BUCKETS)
NODES = Gauge("trainmedic_nodes", "Nodes the coordinator knows, healthy or isolated", ["state"])
JOBS = Gauge("trainmedic_jobs", "Jobs the coordinator knows, by state", ["state"])
# Executor
EXECUTOR_ACKS = Counter("trainmedic_executor_acks", "Answers an executor sent, by status", ["status"])
RANK_EXITS = Counter("trainmedic_rank_exits", "Rank processes that ended, clean (exit 0) or not", ["outcome"])
# Producers (GPU producer, host agent, training hook)
EVENTS_SENT = Counter("trainmedic_producer_events_sent", "Telemetry events queued for Kafka", ["what"])
EVENTS_DROPPED = Counter("trainmedic_producer_events_dropped",
                         "Telemetry events dropped rather than waiting for Kafka", ["what"])
# Alert bridge
ALERTS_DELIVERED = Counter("trainmedic_alerts_delivered", "Incident events a sink accepted", ["sink"])
ALERTS_REJECTED = Counter("trainmedic_alerts_rejected",
                          "Incident events a sink refused as malformed (4xx), not retried", ["sink"])
ALERT_RETRIES = Counter("trainmedic_alert_retries", "Failed attempts that will be retried", ["sink"])
ALERT_BACKLOG = Gauge("trainmedic_alert_backlog", "Incident events waiting for delivery to a sink", ["sink"])
OPEN_INCIDENTS = Gauge("trainmedic_open_incidents", "Incidents open in the log, by severity", ["severity"])


def observe_incident(incident) -> None:
    """Count one published incident event; an opening also records its detection delay."""
    INCIDENTS.labels(incident.category, str(incident.severity), str(incident.status)).inc()
    if incident.status == "open":
        DETECTION_DELAY.labels(str(incident.severity)).observe(max(0.0, incident.ts - incident.first_ts))


def serve_metrics(port: int | None, addr: str = "0.0.0.0") -> int | None:
    """Start the metrics endpoint in a background thread when `port` is set; the port it listens on."""
    if port is None:
        return None
    server, _ = start_http_server(port, addr=addr)
    bound = server.server_port
    log.info("Prometheus metrics on http://%s:%d/metrics", addr, bound)
    return bound
