"""The `--metrics-port` flag of every long-running service.

Apart from bus.metrics so that building the parsers (`trainmedic --help`) does not
import prometheus_client.
"""

from __future__ import annotations

import argparse


def add_metrics_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metrics-port", type=int, metavar="PORT",
                        help="serve Prometheus metrics on this port, all interfaces (off by default; "
                        "docs/metrics.md lists the suggested ports)")
