"""Run a local single-node Apache Kafka broker (KRaft mode) for demos, tests and small clusters: on
127.0.0.1, or with --listen on an address other hosts reach, then with TLS on every listener; secure by
default (SASL/SCRAM, one user per role, each with its ACLs; --insecure runs it plain), its files under
TRAINMEDIC_HOME (docs/security.md, "Broker authentication and ACLs").
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from trainmedic.bus.settings import KafkaSettings, credentials_dir, home
from trainmedic.common.errors import ConfigError, TrainmedicError
from trainmedic.local.broker import DEFAULT_PORT, INSECURE, LocalBroker, broker_port
from trainmedic.local.broker_listen import PLAINTEXT_OFF_LOOPBACK, Listener, listener_from
from trainmedic.local.broker_tls import OperatorTls

log = logging.getLogger("trainmedic.local.broker")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["start", "stop", "status", "fetch"],
                        help="fetch: only copy the pinned Kafka jars from Maven (start does it when missing)")
    parser.add_argument(
        "--port", type=int, default=None,
        help=f"client port on 127.0.0.1 (controller: port + 1); env TRAINMEDIC_BROKER_PORT, "
             f"default {DEFAULT_PORT}",
    )
    parser.add_argument(
        "--listen", metavar="ADDR:PORT", default=None,
        help="start: listen on this address instead of 127.0.0.1 (the controller on PORT + 1; "
             "0.0.0.0 or [::] for every address, with --advertise); off loopback every listener is TLS",
    )
    parser.add_argument(
        "--advertise", metavar="HOST:PORT", default=None,
        help="start (with --listen): the address clients are told to connect to, written into the role "
             "files and the certificate (default: the --listen address)",
    )
    parser.add_argument("--tls", action="store_true",
                        help="start: TLS on every listener on any address, loopback too (the default off "
                             "loopback); the CA goes to the credentials folder as ca.pem")
    parser.add_argument("--tls-ca", metavar="FILE", type=Path, default=None,
                        help="start: your CA (PEM) instead of one made under TRAINMEDIC_HOME/broker/tls/ "
                             "(implies TLS; with --tls-cert and --tls-key)")
    parser.add_argument("--tls-cert", metavar="FILE", type=Path, default=None,
                        help="start: the broker's certificate (PEM), signed by --tls-ca, naming the "
                             "--advertise host and the --listen address")
    parser.add_argument("--tls-key", metavar="FILE", type=Path, default=None,
                        help="start: the certificate's private key (PEM, unencrypted)")
    parser.add_argument("--plaintext", action="store_true",
                        help="start: allow a plain (non-TLS) listener off loopback: records and SASL "
                             "exchanges cross the network in the clear (a loud warning)")
    parser.add_argument("--timeout", type=float, default=90.0, metavar="SECONDS",
                        help="how long `start` waits for the broker to accept clients")
    parser.add_argument("--insecure", action="store_true",
                        help="start: no authentication and no ACLs (and no credentials files); off "
                             "loopback only with --plaintext")


def listener_of(args: argparse.Namespace, port: int) -> tuple[Listener, OperatorTls | None]:
    """The listener and the operator's TLS files the start's flags ask for; ConfigError if they clash."""
    if args.listen is not None and args.port is not None:
        raise ConfigError("give --listen ADDR:PORT or --port, not both (--port is 127.0.0.1's)")
    files = (args.tls_ca, args.tls_cert, args.tls_key)
    if any(files) and not all(files):
        raise ConfigError("--tls-ca, --tls-cert and --tls-key go together: give all three")
    operator = OperatorTls(*files) if all(files) else None
    listener = listener_from(port, args.listen, args.advertise, tls=args.tls or operator is not None,
                             plaintext=args.plaintext, insecure=args.insecure)
    return listener, operator


def run(args: argparse.Namespace) -> int:
    try:
        port = args.port if args.port is not None else broker_port()
        start = args.action == "start"
        listener, operator = listener_of(args, port) if start else (Listener(port=port), None)
    except ConfigError as err:
        print(f"trainmedic broker {args.action}: {err}", file=sys.stderr)
        return 2
    broker = LocalBroker(home(), listener=listener, tls_files=operator, credentials_dir=credentials_dir())
    try:
        if args.action == "start":
            if args.insecure:
                log.warning(INSECURE.format(where=listener.listen))  # on stderr
            if not (listener.tls or listener.loopback):
                log.warning(PLAINTEXT_OFF_LOOPBACK.format(where=listener.listen))
            began = time.monotonic()
            prefix = KafkaSettings.from_env().topic_prefix
            state, started = broker.start(timeout_s=args.timeout, secure=not args.insecure,
                                          prefixes=(prefix,))
            if started:
                how = (f"secure, credentials in {broker.credentials}" if state.secure
                       else "INSECURE: no authentication")
                how += ", TLS" if state.tls else ""
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
            how = ("secure" if state.secure else "INSECURE") + (", TLS" if state.tls else "")
            print(f"broker running at {state.bootstrap} ({how}, listening on {state.host}:{state.port}, "
                  f"pid {state.pid}, home {broker.home})")
    except TrainmedicError as err:  # the broker's own errors, and Kafka's while setting up users and ACLs
        print(f"trainmedic broker {args.action}: {err}", file=sys.stderr)
        return 1
    return 0
