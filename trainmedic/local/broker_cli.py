"""Run a local Apache Kafka broker (KRaft mode) for demos, tests and small clusters: on 127.0.0.1, or
with --listen on an address other hosts reach, then with TLS on every listener; a single node, or with
--node-id one member of a cluster of three or more (`init --members` makes what they share); secure by
default (SASL/SCRAM, one user per role, each with its ACLs; --insecure runs it plain), its files under
TRAINMEDIC_HOME (docs/security.md, "Broker authentication and ACLs", "A cluster of brokers").
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from trainmedic.bus.settings import KafkaSettings, credentials_dir, home
from trainmedic.common.errors import ConfigError, TrainmedicError
from trainmedic.common.timespan import duration_arg
from trainmedic.local import broker_cluster
from trainmedic.local.broker import DEFAULT_PORT, INSECURE, LocalBroker, broker_port
from trainmedic.local.broker_cluster import Member
from trainmedic.local.broker_listen import PLAINTEXT_OFF_LOOPBACK, Listener, listener_from
from trainmedic.local.broker_tls import OperatorTls

log = logging.getLogger("trainmedic.local.broker")

INVITE_TTL_S = 3600.0
REGISTRAR_PORT = 9443


CLUSTER_STEPS = (
    "A cluster of three hosts h1, h2, h3: on h1 `trainmedic broker init --members "
    "1@h1:9092,2@h2:9092,3@h3:9092`; copy h1's TRAINMEDIC_HOME/broker/cluster/ (cluster.json, "
    "secrets.json, ca.pem, ca.key) to the same place on h2 and h3 (`scp -rp`: the secrets stay 0600); "
    "then on each host N `trainmedic broker start --node-id N` (each waits for a majority); "
    "`status` and `stop` are each host's. Topics get 3 replicas, 2 of them in sync for acks=all.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = CLUSTER_STEPS
    parser.add_argument("action", choices=["start", "stop", "status", "fetch", "init", "add-node",
                                           "remove-node", "registrar", "invite"],
                        help="fetch: only copy the pinned Kafka jars from Maven (start does it when "
                             "missing); init: make a cluster's shared folder (--members); add-node NODE: "
                             "the node's own principal and the folder its `trainmedic node` runs with; "
                             "remove-node NODE: its principal and ACLs deleted (its writes refused); "
                             "registrar: serve, until stopped, the nodes an operator enrolled (`trainmedic "
                             "nodes enroll`) as they join with their token (`trainmedic node --join`), and "
                             "delete the principal of each node removed (`trainmedic nodes remove`); "
                             "invite ROLE...: a one-time token (its last line) with which a control-plane "
                             "host gets its roles' files and keys (`trainmedic join`)")
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="add-node, remove-node: the node's name; invite: the host's roles, some of "
                             "detector, coordinator, operator (a control host: detector coordinator)")
    parser.add_argument("--expires", type=duration_arg, default=INVITE_TTL_S, metavar="SPAN",
                        help="invite: how long the token may be used (default 1h; e.g. 15m, 2h)")
    parser.add_argument("--registrar-port", type=int, default=REGISTRAR_PORT, metavar="PORT",
                        help="invite: the port `trainmedic broker registrar` serves on (default 9443)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="add-node: write the node's folder here (default "
                             "TRAINMEDIC_HOME/broker/nodes/NODE)")
    parser.add_argument(
        "--members", metavar="ID@HOST:PORT,...", default=None,
        help="init: the cluster's members (3 or more), each a node id and the address clients reach it at "
             "(its controller listens on PORT + 1); init makes the cluster id, the roles' passwords and a "
             "CA in TRAINMEDIC_HOME/broker/cluster/: copy that folder to the same place on every member",
    )
    parser.add_argument(
        "--node-id", type=int, default=None, metavar="N",
        help="start: this host's member of the cluster in TRAINMEDIC_HOME/broker/cluster/ (one of its "
             "--members ids); it listens at its member address (or --listen ADDR:PORT, the same port) "
             "and waits until a majority of the members are up",
    )
    parser.add_argument(
        "--port", type=int, default=None,
        help=f"client port on 127.0.0.1 (controller: port + 1); env TRAINMEDIC_BROKER_PORT, "
             f"default {DEFAULT_PORT}",
    )
    parser.add_argument(
        "--listen", metavar="ADDR:PORT", default=None,
        help="start: listen on this address instead of 127.0.0.1 (the controller on PORT + 1; "
             "0.0.0.0 or [::] for every address, with --advertise); off loopback every listener is TLS. "
             "registrar: its HTTPS address (default the broker's listen address, port 9443)",
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
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="how long `start` waits for the broker to accept clients (default 90; a "
                             "cluster's member 300: it waits for a majority of the members)")
    parser.add_argument("--insecure", action="store_true",
                        help="start: no authentication and no ACLs (and no credentials files); off "
                             "loopback only with --plaintext")


def listener_of(args: argparse.Namespace, port: int,
                member: Member | None = None) -> tuple[Listener, OperatorTls | None]:
    """The listener and the operator's TLS files the start's flags ask for (a `member` listens at its
    address in the cluster); ConfigError if they clash."""
    if args.listen is not None and args.port is not None:
        raise ConfigError("give --listen ADDR:PORT or --port, not both (--port is 127.0.0.1's)")
    files = (args.tls_ca, args.tls_cert, args.tls_key)
    if any(files) and not all(files):
        raise ConfigError("--tls-ca, --tls-cert and --tls-key go together: give all three")
    operator = OperatorTls(*files) if all(files) else None
    if member is not None:
        clash = [flag for flag, given in (("--port", args.port is not None), ("--advertise", args.advertise),
                                          ("--insecure", args.insecure)) if given]
        if clash:
            raise ConfigError(f"a cluster's member listens and advertises at its --members address, "
                              f"secure: not with {', '.join(clash)}")
        return member.listener(args.listen, tls=args.tls or operator is not None,
                               plaintext=args.plaintext), operator
    listener = listener_from(port, args.listen, args.advertise, tls=args.tls or operator is not None,
                             plaintext=args.plaintext, insecure=args.insecure)
    return listener, operator


def member_of(args: argparse.Namespace, folder: Path) -> Member | None:
    """The cluster's member a start asks for (--node-id), or None for a single broker; ConfigError when
    --members or --node-id is where it does not belong, or a single broker's start finds a cluster."""
    if args.members is not None and args.action != "init":
        raise ConfigError("--members is init's: a member starts with --node-id N")
    if args.action != "start":
        return None
    if args.node_id is not None:
        return Member.load(folder, args.node_id)
    if (folder / "cluster.json").exists():
        raise ConfigError(f"{folder} holds a cluster's files: give --node-id N to start this host's member "
                          "(or move the folder away to start a single broker)")
    return None


def init(folder: Path, members: str | None) -> int:
    """Make the cluster's shared folder; say what to copy where."""
    if members is None:
        raise ConfigError("init needs --members ID@HOST:PORT,... (three or more)")
    cluster, made = broker_cluster.make(folder, broker_cluster.parse_members(members), datetime.now(UTC))
    done = "made" if made else "already made"
    print(f"cluster {cluster.cluster_id} of {cluster.bootstrap} {done} in {folder}:\n"
          f"copy this folder ({', '.join(broker_cluster.FILES)}) as it is (scp -rp) to "
          "TRAINMEDIC_HOME/broker/cluster on every other member, "
          "then run `trainmedic broker start --node-id N` on each (docs/security.md)", file=sys.stderr)
    print(folder)
    return 0


def nodes(args: argparse.Namespace) -> int:
    """add-node / remove-node on the running broker."""
    from trainmedic.local import broker_nodes

    if len(args.names) != 1:
        raise ConfigError(f"{args.action} needs the node's name: trainmedic broker {args.action} NODE")
    args.node = args.names[0]
    broker = broker_nodes.running(home(), credentials_dir())
    if args.action == "remove-node":
        known = broker_nodes.remove(broker, args.node)
        print(f"node {args.node}: principal {broker_nodes.principal(args.node)} and its ACLs deleted"
              + ("" if known else " (it was not added here)"), file=sys.stderr)
        return 0
    prefix = KafkaSettings.from_env().topic_prefix
    folder = broker_nodes.add(broker, args.node, (prefix,), args.out)
    print(f"node {args.node}: principal {broker_nodes.principal(args.node)} with its ACLs for {prefix!r}; "
          f"copy {folder} (scp -rp: the files stay 0600) to the node's TRAINMEDIC_HOME/credentials",
          file=sys.stderr)
    print(folder)
    return 0


def invite(args: argparse.Namespace) -> int:
    """A control-plane host's one-time token, recorded in the broker's invitations."""
    from trainmedic.local import broker_nodes, invites

    roles = invites.roles_of(args.names)
    broker = broker_nodes.running(home(), credentials_dir())
    if broker.ca is None:
        raise ConfigError("the broker runs without TLS: a joining host pins its CA (`trainmedic broker start "
                          "--listen ADDR:PORT`, or --tls on loopback)")
    token, until = invites.invite(broker.dir, broker.ca.read_bytes(), roles, args.expires,
                                  args.registrar_port, time.time())
    print(f"a host of {' and '.join(roles)} invited until "
          f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(until))}. On that host, with the registrar "
          f"(`trainmedic broker registrar`) running here on port {args.registrar_port}, run\n"
          f"  trainmedic join @TOKEN_FILE --bootstrap {broker.bootstrap}\n"
          "with the token below in TOKEN_FILE (readable by its owner only; delete it once joined), or "
          "`-` for it on stdin. The token is a SECRET until it is used or expires: whoever holds it "
          "gets these roles' credentials, once. Token:", file=sys.stderr)
    print(token)
    return 0


def registrar(args: argparse.Namespace) -> int:
    """The registrar, in the foreground: exit 2 when it cannot serve (no broker, no TLS, a busy port)."""
    from trainmedic.common.errors import BrokerError
    from trainmedic.local import registrar

    try:
        return registrar.serve(args.listen)
    except (ConfigError, BrokerError) as err:
        print(f"trainmedic broker registrar: {err}", file=sys.stderr)
        return 2
    except TrainmedicError as err:
        print(f"trainmedic broker registrar: {err}", file=sys.stderr)
        return 1


def run(args: argparse.Namespace) -> int:
    if args.action == "registrar":
        return registrar(args)
    if args.action in ("add-node", "remove-node", "invite"):
        try:
            return invite(args) if args.action == "invite" else nodes(args)
        except ConfigError as err:
            print(f"trainmedic broker {args.action}: {err}", file=sys.stderr)
            return 2
        except TrainmedicError as err:  # no broker here, or Kafka's own errors
            print(f"trainmedic broker {args.action}: {err}", file=sys.stderr)
            return 1
    folder = home() / "broker" / "cluster"
    try:
        if args.action == "init":
            return init(folder, args.members)
        port = args.port if args.port is not None else broker_port()
        start = args.action == "start"
        member = member_of(args, folder)
        listener, operator = listener_of(args, port, member) if start else (Listener(port=port), None)
    except ConfigError as err:
        print(f"trainmedic broker {args.action}: {err}", file=sys.stderr)
        return 2
    broker = LocalBroker(home(), listener=listener, tls_files=operator, credentials_dir=credentials_dir(),
                         member=member)
    timeout_s = args.timeout or (300.0 if member else 90.0)
    try:
        if args.action == "start":
            if args.insecure:
                log.warning(INSECURE.format(where=listener.listen))  # on stderr
            if not (listener.tls or listener.loopback):
                log.warning(PLAINTEXT_OFF_LOOPBACK.format(where=listener.listen))
            began = time.monotonic()
            prefix = KafkaSettings.from_env().topic_prefix
            state, started = broker.start(timeout_s=timeout_s, secure=not args.insecure,
                                          prefixes=(prefix,))
            if started:
                how = (f"secure, credentials in {broker.credentials}" if state.secure
                       else "INSECURE: no authentication")
                how += ", TLS" if state.tls else ""
                how += f", node {state.node_id} of {state.members}" if member else ""
                print(f"broker started in {time.monotonic() - began:.1f}s (pid {state.pid}, {how}, "
                      f"log {broker.log_file})", file=sys.stderr)
            else:
                print(f"broker already running (pid {state.pid})", file=sys.stderr)
            print(broker.bootstrap)
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
            how += f", node {state.node_id} of a {state.members}-member cluster" if state.members > 1 else ""
            print(f"broker running at {state.bootstrap} ({how}, listening on {state.host}:{state.port}, "
                  f"pid {state.pid}, home {broker.home})")
    except TrainmedicError as err:  # the broker's own errors, and Kafka's while setting up users and ACLs
        print(f"trainmedic broker {args.action}: {err}", file=sys.stderr)
        return 1
    return 0
