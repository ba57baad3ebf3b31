"""Run a local single-node Apache Kafka broker (KRaft mode, on 127.0.0.1) for demos and tests.

`start` fetches the pinned Kafka jars with Maven on first use, formats storage, starts the
broker in the background, waits until it accepts clients and prints its bootstrap address.
Its files live under TRAINMEDIC_HOME (default ./.trainmedic); its log in broker/broker.log.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from bus.errors import BrokerError
from bus.settings import home
from trainmedic.broker import DEFAULT_PORT, LocalBroker


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["start", "stop", "status", "fetch"],
                        help="fetch: only copy the pinned Kafka jars from Maven (start does it when missing)")
    parser.add_argument(
        "--port", type=int, default=int(os.environ.get("TRAINMEDIC_BROKER_PORT", DEFAULT_PORT)),
        help=f"client port (controller: port + 1); env TRAINMEDIC_BROKER_PORT, default {DEFAULT_PORT}",
    )
    parser.add_argument("--timeout", type=float, default=90.0, metavar="SECONDS",
                        help="how long `start` waits for the broker to accept clients")


def run(args: argparse.Namespace) -> int:
    broker = LocalBroker(home(), port=args.port)
    try:
        if args.action == "start":
            began = time.monotonic()
            state, started = broker.start(timeout_s=args.timeout)
            if started:
                print(f"broker started in {time.monotonic() - began:.1f}s (pid {state.pid}, "
                      f"log {broker.log_file})", file=sys.stderr)
            else:
                print(f"broker already running (pid {state.pid})", file=sys.stderr)
            print(state.bootstrap)
        elif args.action == "fetch":
            broker.fetch_jars()
            print(broker.libs)
        elif args.action == "stop":
            print("broker stopped" if broker.stop() else "broker was not running")
        else:
            state = broker.state()
            if state is None:
                print(f"broker not running (home {broker.home})")
                return 3
            print(f"broker running at {state.bootstrap} (pid {state.pid}, home {broker.home})")
    except BrokerError as err:
        print(f"trainmedic broker {args.action}: {err}", file=sys.stderr)
        return 1
    return 0
