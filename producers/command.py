"""`trainmedic gpu` and `trainmedic agent`, one command twice: build the config (the node defaults to
this host's name), open what is sampled, then publish it as the agent principal until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainmedic.bus.config import Options, Section
from trainmedic.bus.service_cli import add_service_arguments, exit_with, run_until_stopped
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import ConfigError, TrainmedicError

Open = Callable[[Any, float], Any]  # (config, now) -> what is sampled: GPUs, or the host's links
Publish = Callable[[Any, KafkaSettings, Any, threading.Event], object]  # (config, settings, it, stop)


@dataclass(frozen=True)
class ProducerCommand:
    """A producer's command: its name, its config, and `parts`, which imports how to open and how to
    publish only when the command runs, so that its --help stays quick."""

    name: str
    section: Section
    parts: Callable[[], tuple[Open, Publish]]

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_service_arguments(parser, Options(self.section))

    def run(self, args: argparse.Namespace) -> int:
        """Exit 2 when a setting is wrong; 1 when opening (no NVIDIA driver, say) or publishing fails."""
        from trainmedic.bus.metrics import serve_metrics

        open_, publish = self.parts()
        try:
            config = Options(self.section).build(self.section, args, node=lambda _: socket.gethostname())
            settings = KafkaSettings.from_env(role="agent", bootstrap=args.bootstrap)
            sampled = open_(config, time.time())
        except ConfigError as err:
            return exit_with(2, self.name, err)
        except TrainmedicError as err:
            return exit_with(1, self.name, err)
        serve_metrics(args.metrics_port, args.metrics_host)
        return run_until_stopped(self.name, lambda stop: publish(config, settings, sampled, stop))
