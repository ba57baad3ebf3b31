"""What every long-running service's command shares: its options from its config, then the Kafka and
metrics flags; its exit codes (2: a setting is wrong, found before anything starts; 1: it failed
while running); and its run until SIGTERM or SIGINT, which end the loop instead of the process.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable

from trainmedic.bus.config import Options
from trainmedic.bus.settings import DEFAULT_BOOTSTRAP
from trainmedic.common.errors import TrainmedicError
from trainmedic.common.metrics_flag import add_metrics_argument
from trainmedic.common.signals import stop_on_signals


def add_service_arguments(parser: argparse.ArgumentParser, options: Options, epilog: str | None = None
                          ) -> None:
    """`options` (the flags of the service's config), then the Kafka and metrics flags; `epilog`, the
    config file's format, printed as written."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = epilog
    options.add_to(parser)
    add_kafka_arguments(parser)


def add_kafka_arguments(parser: argparse.ArgumentParser) -> None:
    """`--bootstrap`, `--metrics-port` and `--metrics-host`, which every service takes."""
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP, "
                        f"default {DEFAULT_BOOTSTRAP})")
    add_metrics_argument(parser)


def exit_with(code: int, command: str, err: Exception) -> int:
    """`code`, once stderr says why `trainmedic COMMAND` ends."""
    print(f"trainmedic {command}: {err}", file=sys.stderr)
    return code


def run_until_stopped(command: str, body: Callable[[threading.Event], object]) -> int:
    """Run `body(stop)`, SIGTERM and SIGINT setting `stop`: 0 when it returns, 1 when it fails."""
    stop = threading.Event()
    try:
        with stop_on_signals(stop):
            body(stop)
    except TrainmedicError as err:
        return exit_with(1, command, err)
    return 0
