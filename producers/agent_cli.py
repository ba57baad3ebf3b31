"""Publish this host's node_heartbeat once per interval, with the state of its data-plane links.

Links are read from sysfs: every non-loopback, non-virtual NIC (/sys/class/net) and every
InfiniBand port (/sys/class/infiniband, named DEV:PORT), or just those named by --links.
For demos, a link can be made to flap (report down) for a while:

  --inject flap=eth0,at=20s,for=3s     eth0 reports down from 20 s after start, for 3 s

While running, append such specs to the --control file to flap a link at once (or `at`
after the line is read).
"""

from __future__ import annotations

import argparse
import socket
import sys

from bus.timespan import duration_arg
from producers.cli_args import add_delivery_arguments, names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--node", help="this node's name (default: this host's name)")
    parser.add_argument("--interval", type=duration_arg, default=1.0, metavar="DURATION",
                        help="time between heartbeats, promised in each (default 1s)")
    parser.add_argument("--links", type=names, default=(), metavar="L1,L2",
                        help="the links to report, e.g. eth0,ib0,mlx5_0:1 (default: every non-loopback, "
                        "non-virtual NIC and every InfiniBand port)")
    parser.add_argument("--sysfs", default="/sys", metavar="DIR", help="sysfs root (default /sys)")
    parser.add_argument("--inject", action="append", default=[], metavar="SPEC",
                        help="a link flap to inject (repeatable): flap=LINK,at=DURATION,for=DURATION")
    parser.add_argument("--control", metavar="FILE",
                        help="a file the agent watches: each line appended is a flap spec to inject")
    add_delivery_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import threading
    import time
    from pathlib import Path

    from bus.errors import ConfigError, TrainmedicError
    from bus.metrics import serve_metrics
    from bus.settings import KafkaSettings
    from bus.signals import stop_on_signals
    from producers.agent import open_agent, run_agent
    from producers.config import Delivery, HostAgentConfig
    from producers.faults import LinkFlap, parse_fault

    try:
        faults = [parse_fault(spec) for spec in args.inject]
        flaps = tuple(fault for fault in faults if isinstance(fault, LinkFlap))
        if len(flaps) != len(faults):
            raise ConfigError("GPU faults are injected by `trainmedic gpu --source synthetic`, not the agent")
        config = HostAgentConfig(
            node=args.node or socket.gethostname(), interval_s=args.interval, links=args.links,
            sysfs=Path(args.sysfs), flaps=flaps, control=Path(args.control) if args.control else None,
            delivery=Delivery(max_buffered=args.max_buffered, flush_timeout_s=args.flush_timeout),
        )
        settings = KafkaSettings.from_env(bootstrap=args.bootstrap)
        agent = open_agent(config, time.time())
    except ConfigError as err:
        print(f"trainmedic agent: {err}", file=sys.stderr)
        return 2
    stop = threading.Event()
    try:
        with stop_on_signals(stop):
            serve_metrics(args.metrics_port)
            run_agent(config, settings, agent, stop)
    except TrainmedicError as err:
        print(f"trainmedic agent: {err}", file=sys.stderr)
        return 1
    return 0
