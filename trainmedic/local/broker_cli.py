"""Run a local single-node Apache Kafka broker (KRaft mode, on 127.0.0.1) for demos and tests: secure by
default (SASL/SCRAM, one user per role, each with its ACLs; --insecure runs it plain), its files under
TRAINMEDIC_HOME (docs/security.md, "Broker authentication and ACLs").
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from trainmedic.bus.settings import KafkaSettings, credentials_dir, home
from trainmedic.common.errors import ConfigError, TrainmedicError
from trainmedic.local.broker import DEFAULT_PORT, INSECURE, LocalBroker, broker_port

log = logging.getLogger("trainmedic.local.broker")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["start", "stop", "status", "fetch"],
                        help="fetch: only copy the pinned Kafka jars from Maven (start does it when missing)")
    parser.add_argument(
        "--port", type=int, default=None,
        help=f"client port (controller: port + 1); env TRAINMEDIC_BROKER_PORT, default {DEFAULT_PORT}",
    )
    parser.add_argument("--timeout", type=float, default=90.0, metavar="SECONDS",
                        help="how long `start` waits for the broker to accept clients")
    parser.add_argument("--insecure", action="store_true",
                        help="start: no authentication and no ACLs (and no credentials files)")


def run(args: argparse.Namespace) -> int:
    try:
        port = args.port if args.port is not None else broker_port()
    except ConfigError as err:
        print(f"trainmedic broker {args.action}: {err}", file=sys.stderr)
        return 2
    broker = LocalBroker(home(), port=port, credentials_dir=credentials_dir())
    try:
        if args.action == "start":
            if args.insecure:
                log.warning(INSECURE.format(port=port))  # on stderr
            began = time.monotonic()
            prefix = KafkaSettings.from_env().topic_prefix
            state, started = broker.start(timeout_s=args.timeout, secure=not args.insecure,
                                          prefixes=(prefix,))
            if started:
                how = (f"secure, credentials in {broker.credentials}" if state.secure
                       else "INSECURE: no authentication")
                print(f"broker started in {time.monotonic() - began:.1f}s (pid {state.pid}, {how}, "
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
            how = "secure" if state.secure else "INSECURE"
            print(f"broker running at {state.bootstrap} ({how}, pid {state.pid}, home {broker.home})")
    except TrainmedicError as err:  # the broker's own errors, and Kafka's while setting up users and ACLs
        print(f"trainmedic broker {args.action}: {err}", file=sys.stderr)
        return 1
    return 0
