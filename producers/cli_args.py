"""Argument types and flags the producer commands share."""

from __future__ import annotations

import argparse

from bus.metrics_flag import add_metrics_argument
from bus.timespan import duration_arg


def names(text: str) -> tuple[str, ...]:
    """An argparse type: a comma-separated list of names."""
    items = tuple(item.strip() for item in text.split(","))
    if not all(items):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of names")
    return items


def add_delivery_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Kafka delivery")
    group.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP, "
                       "default 127.0.0.1:9092)")
    group.add_argument("--max-buffered", type=int, default=10_000, metavar="N",
                       help="messages held locally while Kafka is away; past that, new ones are dropped "
                       "and counted (default %(default)s)")
    group.add_argument("--flush-timeout", type=duration_arg, default=5.0, metavar="DURATION",
                       help="on SIGTERM/SIGINT, how long to try to deliver what is queued (default 5s)")
    add_metrics_argument(parser)
