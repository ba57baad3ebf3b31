"""Let a new node into the cluster, or take one out for good (docs/security.md, "One identity per node").

  enroll NODE     an operator-signed `node_enrolled` on `nodes`, and a one-time join token printed on the
                  last line: `trainmedic node --join @TOKEN_FILE` on the node's host redeems it at the
                  broker's registrar for the node's own Kafka principal, and the coordinators' keys
  remove NODE     an operator-signed `node_removed`: the registrar deletes its principal, the coordinator
                  trusts its key no more and moves its jobs off it

Both need the operator key (--keys-dir); enroll also needs a TLS broker (its CA, `ca.pem` beside
operator.json, is what the token pins) and the coordinators' keys trusted in the same keys folder.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from trainmedic.bus import acls
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import ConfigError
from trainmedic.common.timespan import duration_arg
from trainmedic.recovery import keyring
from trainmedic.recovery.join_token import make_token, public_key_model
from trainmedic.recovery.signing import SigningKey
from trainmedic.schemas.nodes import MAX_COORDINATORS, NodeEnrolled, NodeRemoved

DEFAULT_TTL_S = 3600.0
REGISTRAR_PORT = 9443
NO_COORDINATORS = ("trust the coordinators' keys here first: trainmedic keys trust ID.pub --role coordinator "
                   "(the node trusts the coordinator keys that this keys folder trusts)")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """`enroll` and `remove`, as subcommands of `trainmedic nodes`."""
    enroll = sub.add_parser("enroll", help="let NODE join once, with a join token (printed on the last line)",
                            description="Publish NODE's enrollment, signed with the operator key, and print "
                                        "its one-time join token on the last line of the output.")
    enroll.add_argument("node", metavar="NODE")
    enroll.add_argument("--expires", type=duration_arg, default=DEFAULT_TTL_S, metavar="SPAN",
                        help="how long the token may be used (default 1h; e.g. 15m, 2h)")
    enroll.add_argument("--registrar-port", type=int, default=REGISTRAR_PORT, metavar="PORT",
                        help="the port of `trainmedic broker registrar` on the broker's host (default 9443)")
    remove = sub.add_parser("remove", help="take NODE out for good: its principal deleted, its key untrusted",
                            description="Publish NODE's removal, signed with the operator key.")
    remove.add_argument("node", metavar="NODE")
    remove.add_argument("--reason", default="", help="why, for the log")
    for parser in (enroll, remove):
        parser.add_argument("--by", default=None, help="who (default: the user name)")
        parser.add_argument("--keys-dir", type=Path, metavar="DIR",
                            help="the keys folder holding the operator key that signs (default "
                                 "$TRAINMEDIC_HOME/keys; `trainmedic keys generate --role operator`)")
        parser.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP)")


def broker_ca(settings: KafkaSettings) -> bytes:
    """The broker's CA as the operator's settings name it; ConfigError for a broker without TLS."""
    protocol = settings.extra.get("security.protocol", "PLAINTEXT")
    location = settings.extra.get("ssl.ca.location")
    if not protocol.endswith("SSL"):
        raise ConfigError(f"the broker is reached without TLS ({protocol}): enrollment needs a TLS broker, "
                          "whose CA the join token pins (`trainmedic broker start --listen ADDR:PORT`)")
    if not location or location == "probe":
        raise ConfigError("the operator's Kafka settings name no CA file (ssl.ca.location): copy the "
                          "broker's ca.pem beside operator.json, as `broker start` wrote it")
    try:
        return Path(location).read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read the broker's CA {location}: {err.strerror or err}") from None


def coordinator_keys(keys_dir: Path):
    """The coordinators' public keys this operator trusts, as an enrollment carries them."""
    trusted = keyring.load_roles(keys_dir).get(keyring.COORDINATOR)
    if trusted is None or not trusted.keys:
        raise ConfigError(NO_COORDINATORS)
    if len(trusted.keys) > MAX_COORDINATORS:
        raise ConfigError(f"{len(trusted.keys)} coordinator keys are trusted in {keys_dir}, an enrollment "
                          f"carries at most {MAX_COORDINATORS}: revoke the old ones")
    return tuple(public_key_model(public) for _, public in sorted(trusted.keys.items()))


def enroll(settings: KafkaSettings, key: SigningKey, keys_dir: Path, node: str, ttl_s: float, port: int,
           by: str, now: float) -> tuple[str, NodeEnrolled]:
    """Publish node `node`'s enrollment until `now + ttl_s`; its join token and the event."""
    try:
        acls.node_principal(node)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if ttl_s <= 0 or not 0 < port < 65536:
        raise ConfigError("--expires must be a positive span, --registrar-port from 1 to 65535")
    token, token_signer = make_token(node, broker_ca(settings), port)
    public = public_key_model(token_signer.private.public_key())
    event = key.sign(NodeEnrolled(ts=now, node=node, token=public, expires=now + ttl_s,
                                  coordinators=coordinator_keys(keys_dir), by=by,
                                  deployment=settings.topics.prefix))
    with EventProducer(settings, client_id=settings.topics.owned("nodes")) as producer:
        producer.send(settings.topics.nodes, event, key=node)
    return token, event


def remove(settings: KafkaSettings, key: SigningKey, node: str, reason: str, by: str,
           now: float) -> NodeRemoved:
    """Publish node `node`'s removal."""
    event = key.sign(NodeRemoved(ts=now, node=node, reason=reason, by=by, deployment=settings.topics.prefix))
    with EventProducer(settings, client_id=settings.topics.owned("nodes")) as producer:
        producer.send(settings.topics.nodes, event, key=node)
    return event


def run(args: argparse.Namespace, settings: KafkaSettings, by: str) -> int:
    """`nodes enroll` or `nodes remove`, with the operator key of --keys-dir."""
    keys_dir = args.keys_dir or keyring.default_dir()
    key = keyring.load_signing(keys_dir, keyring.OPERATOR)
    now = time.time()
    if args.action == "remove":
        remove(settings, key, args.node, args.reason, by, now)
        print(f"node {args.node}: removed from deployment {settings.topics.prefix}. The registrar deletes "
              "its Kafka principal (its writes are refused within seconds), the coordinator trusts its "
              "key no more and moves its jobs off it. To let it back, `trainmedic nodes enroll` it again.")
        return 0
    token, event = enroll(settings, key, keys_dir, args.node, args.expires, args.registrar_port, by, now)
    until = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(event.expires))
    print(f"node {args.node} enrolled in deployment {settings.topics.prefix} until {until}, "
          f"trusting coordinator keys {', '.join(k.key_id for k in event.coordinators)}.")
    print(f"On the node's host (the registrar, `trainmedic broker registrar`, must run on the broker's, port "
          f"{args.registrar_port}), run, with the token below and the node's usual flags:")
    print(f"  trainmedic node --join @TOKEN_FILE --bootstrap {settings.bootstrap} ...")
    print("with the token in TOKEN_FILE (readable by its owner only; delete it once joined), or `--join -` "
          "with the token on stdin: given as --join TOKEN it would stay in the process list.")
    print("The token is a SECRET until it is used or expires: whoever holds it joins as this node, once. "
          "Send it to that host only, over a private channel. Token:")
    print(token)
    return 0
