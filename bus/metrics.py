"""Metrics every consumer shares, and how a service serves its metrics (`--metrics-port`, on loopback
unless told otherwise). Each service defines its own, named `trainmedic_…`; docs/metrics.md describes
each, and the Grafana dashboard may use only those.
"""

from __future__ import annotations

import logging

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from trainmedic.common.metrics_flag import metrics_host

log = logging.getLogger(__name__)

DEAD_LETTERS = Counter("trainmedic_dead_letters", "Messages sent to the dlq because they did not validate",
                       ["service"])
DEAD_LETTER_FAILURES = Counter("trainmedic_dead_letter_failures",
                               "Writes of a dead letter the dlq did not take: tried again (`retried`), "
                               "or given up after the last (`lost`)", ["outcome"])
CONSUMER_LAG = Gauge("trainmedic_consumer_lag", "Messages a consumer group has not committed yet "
                     "(high watermark - committed offset), sampled every few seconds",
                     ["group", "topic", "partition"])
# What an Outbox (bus/outbox.py) queued or dropped: the GPU producer's, the host agent's, an executor's.
EVENTS_SENT = Counter("trainmedic_producer_events_sent", "Telemetry events queued for Kafka", ["what"])
EVENTS_DROPPED = Counter("trainmedic_producer_events_dropped",
                         "Telemetry events dropped rather than waiting for Kafka", ["what"])
# Each service observes the phases of a recovery it sees: the coordinator detect, plan and commands;
# an executor stop, launch and each rank's rendezvous, restore and first_step (docs/metrics.md).
RECOVERY_PHASE = Histogram("trainmedic_recovery_phase_seconds",
                           "The phases of a recovery a service sees (the phase label says which)", ["phase"],
                           buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300))


def serve_metrics(port: int | None, addr: str | None = None) -> int | None:
    """Start the metrics endpoint in a background thread when `port` is set, on `addr` (None:
    TRAINMEDIC_METRICS_HOST, else 127.0.0.1); the port it listens on."""
    if port is None:
        return None
    addr = addr or metrics_host()
    server, _ = start_http_server(port, addr=addr)
    bound = server.server_port
    log.info("Prometheus metrics on http://%s:%d/metrics", addr, bound)
    return bound
