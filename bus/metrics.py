"""Metrics every consumer shares, and how a service serves its metrics (`--metrics-port`, on loopback
unless told otherwise). Each service defines its own, named `trainmedic_…`; docs/metrics.md describes
each, and the Grafana dashboard may use only those.
"""

from __future__ import annotations

import logging

from prometheus_client import Counter, Gauge, start_http_server

from trainmedic.bus.metrics_flag import metrics_host

log = logging.getLogger(__name__)

DEAD_LETTERS = Counter("trainmedic_dead_letters", "Messages sent to the dlq because they did not validate",
                       ["service"])
DEAD_LETTER_FAILURES = Counter("trainmedic_dead_letter_failures",
                               "Writes of a dead letter the dlq did not take: tried again (`retried`), "
                               "or given up after the last (`lost`)", ["outcome"])
CONSUMER_LAG = Gauge("trainmedic_consumer_lag", "Messages a consumer group has not committed yet "
                     "(high watermark - committed offset), sampled every few seconds",
                     ["group", "topic", "partition"])


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
