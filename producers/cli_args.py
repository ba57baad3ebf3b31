"""Argument types and flags the producer commands share (their own options come from their configs)."""

from __future__ import annotations

import argparse

from trainmedic.bus.metrics_flag import add_metrics_argument


def add_kafka_arguments(parser: argparse.ArgumentParser) -> None:
    """`--bootstrap` and `--metrics-port`, which every producer command takes."""
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP, "
                        "default 127.0.0.1:9092)")
    add_metrics_argument(parser)
