"""The `--metrics-port` and `--metrics-host` flags of every long-running service, apart from
trainmedic.bus.metrics so that building the parsers does not import prometheus_client (docs/metrics.md).
"""

from __future__ import annotations

import argparse
import os

HOST_ENV = "TRAINMEDIC_METRICS_HOST"
DEFAULT_HOST = "127.0.0.1"


def metrics_host() -> str:
    """The address the metrics endpoint binds: TRAINMEDIC_METRICS_HOST, else loopback."""
    return os.environ.get(HOST_ENV) or DEFAULT_HOST


def add_metrics_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metrics-port", type=int, metavar="PORT",
                        help="serve Prometheus metrics on this port (off by default; "
                        "docs/metrics.md lists the suggested ports)")
    parser.add_argument("--metrics-host", default=metrics_host(), metavar="ADDR",
                        help=f"the address the metrics endpoint binds (env {HOST_ENV}, default "
                        f"{DEFAULT_HOST}: this machine only; 0.0.0.0 for a Prometheus elsewhere)")
