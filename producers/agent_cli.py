"""Publish this host's node_heartbeat once per interval, with the state of its data-plane links read
from sysfs; a link can be made to flap for demos (--inject, --control; docs/producers.md, "Host agent").
  --inject flap=eth0,at=20s,for=3s     eth0 reports down from 20 s after start, for 3 s
"""

from __future__ import annotations

import argparse
import socket
import sys

from trainmedic.bus.config import Options, Section
from trainmedic.producers.cli_args import add_kafka_arguments
from trainmedic.producers.config import HostAgentConfig

AGENT = Section(HostAgentConfig, env="AGENT")
OPTIONS = Options(AGENT)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    OPTIONS.add_to(parser)
    add_kafka_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import threading
    import time

    from trainmedic.bus.errors import ConfigError, TrainmedicError
    from trainmedic.bus.metrics import serve_metrics
    from trainmedic.bus.settings import KafkaSettings
    from trainmedic.bus.signals import stop_on_signals
    from trainmedic.producers.agent import open_agent, run_agent

    try:
        config = OPTIONS.build(AGENT, args, node=lambda _: socket.gethostname())
        settings = KafkaSettings.from_env(role="agent", bootstrap=args.bootstrap)
        agent = open_agent(config, time.time())
    except ConfigError as err:
        print(f"trainmedic agent: {err}", file=sys.stderr)
        return 2
    stop = threading.Event()
    try:
        with stop_on_signals(stop):
            serve_metrics(args.metrics_port, args.metrics_host)
            run_agent(config, settings, agent, stop)
    except TrainmedicError as err:
        print(f"trainmedic agent: {err}", file=sys.stderr)
        return 1
    return 0
