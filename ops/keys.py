"""Create, rotate, trust, revoke and list the Ed25519 keys that sign commands, jobs, node events and
acks (docs/security.md#keys).

Roles: `coordinator` (the default of generate and rotate) signs commands; `operator` (--role
operator) signs jobs and node events; `node:NAME` (--node NAME) signs node NAME's acks. `generate`
writes a role's first key pair and makes it the signing key (private key mode 0600); `rotate` writes
a new one and deletes the old private key, keeping the old public key trusted (a node's new key is
first announced on the acks topic, signed by the old one: the coordinator takes it from the log, and
the old one signs for 10 minutes more; `--no-announce` skips that, the old way); `trust FILE.pub`
adds a public key made elsewhere for the role it names (always said: a key is trusted only for the
role it was trusted for); `revoke ID` trusts a key no more, for good; `list` prints each key; `sync`
trusts the coordinator keys the broker's host trusts (and its operator keys, on a coordinator's host)
and revokes what it revoked, from its registrar (`trainmedic join`). The folder is --keys-dir, else
$TRAINMEDIC_HOME/keys. Never copy a .key file to another machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from trainmedic.bus.settings import credentials_dir
from trainmedic.common.errors import ConfigError
from trainmedic.ops.prologue import run_command
from trainmedic.recovery import key_manifest, keyring
from trainmedic.recovery.coordinator.core.membership import ROTATION_GRACE_S
from trainmedic.recovery.signing import SigningKey


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text in (("generate", "write a first key pair of a role and make it the role's signing key"),
                       ("rotate", "write a new signing key of a role; keep the old public key trusted"),
                       ("trust", "copy a public key made elsewhere into the folder, trusted for the role "
                                 "given (--role coordinator|operator or --node NAME)"),
                       ("revoke", "trust a key no more, for good: recorded as revoked, its files deleted"),
                       ("list", "print every key: id, role, trust, kind, created, signing, private here"),
                       ("sync", "trust the keys the broker's host trusts, revoke those it revoked (from "
                                "its registrar, over TLS checked against this host's ca.pem)")):
        action = sub.add_parser(name, help=text, description=text)
        if name == "trust":
            action.add_argument("public", type=Path, metavar="ID.pub", help="the public key file (PEM)")
        if name == "revoke":
            action.add_argument("key_id", metavar="KEY_ID", help="the key's id (`trainmedic keys list`)")
            action.add_argument("--force", action="store_true",
                                help="revoke it even if it is the signing key of its role here (a stolen "
                                     "key), leaving the role nothing to sign with until `keys generate`")
        if name == "sync":
            action.add_argument("--bootstrap", help="the broker, whose host runs the registrar (HOST:PORT; "
                                                    "env TRAINMEDIC_KAFKA_BOOTSTRAP)")
            action.add_argument("--registrar-port", type=int, default=9443, metavar="PORT",
                                help="the registrar's port (default 9443)")
        if name == "rotate":
            action.add_argument("--no-announce", action="store_true",
                                help="with --node: rotate by hand, announcing nothing (a node whose keys "
                                     "the coordinator trusts by hand): the first run makes the new key, not "
                                     "signing yet, to trust on the coordinator's host (`keys trust ID.pub "
                                     "--node NAME`); the second makes it the signing key. By default the new "
                                     "key is announced on the acks topic, signed by the old one, then used")
        if name in ("generate", "rotate", "trust"):
            role = action.add_mutually_exclusive_group(required=name == "trust")
            role.add_argument("--role", choices=("coordinator", "operator"),
                              help="coordinator (signs commands; the default of generate and rotate) or "
                                   "operator (signs jobs and node events)")
            role.add_argument("--node", metavar="NAME", help="the key of node NAME (signs its acks)")
        action.add_argument("--keys-dir", type=Path, metavar="DIR",
                            help="the keys folder (default $TRAINMEDIC_HOME/keys)")


def run(args: argparse.Namespace) -> int:
    return run_command("keys", _run, args)


def _run(args: argparse.Namespace) -> int:
    directory = args.keys_dir or keyring.default_dir()
    if args.action == "list":
        return _list(directory, keyring.list_keys(directory))
    if args.action == "revoke":
        return _revoke(directory, keyring.revoke_key(directory, args.key_id, time.time(), args.force))
    if args.action == "sync":
        return _sync(args, directory)
    role = keyring.node_role(args.node) if args.node else args.role or keyring.COORDINATOR
    if args.action == "generate":
        key_id = keyring.generate_key(directory, time.time(), role)
        print(f"{role} signing key {key_id}: private {directory / (key_id + '.key')} (0600), "
              f"public {directory / (key_id + '.pub')}; {_where(role, key_id)}")
    elif args.action == "rotate" and args.node:
        return _rotate_node(directory, args.node, announce=not args.no_announce)
    elif args.action == "rotate":
        old, new = keyring.rotate_key(directory, time.time(), role)
        print(f"{role} signing key {new} replaces {old} (its private key deleted, its public key still "
              f"trusted); {_where(role, new)}; {_switch(role)}; once nothing signed by {old} is in flight, "
              f"`trainmedic keys revoke {old}` where it is trusted (docs/security.md, \"Keys\")")
    else:
        key_id = keyring.trust_key(directory, args.public, role, time.time())
        print(f"key {key_id} trusted here as {role} ({directory / (key_id + '.pub')})")
    return 0


def _rotate_node(directory: Path, node: str, announce: bool) -> int:
    """A node's new key, announced before it is used: its `node_key_rotated`, signed by the key it
    replaces, goes to the acks topic with the node's own credentials; only once Kafka took it, dated
    within a minute of the broker's clock (the coordinator's check), is the new key made the node's
    signing key (its executor signs with it from its next report). A try that fails keeps the new key
    waiting: the next announces the same one. Without `announce`: the first call makes the key for the
    coordinator's host to trust by hand, the second makes it the signing key."""
    role = keyring.node_role(node)
    old = keyring.load_signing(directory, role)
    waiting = key_manifest.read(directory).get("next", {}).get(role)
    new = keyring.next_key(directory, time.time(), role)
    if not announce and waiting is None:
        print(f"{role} key {new.key_id} made, not signing yet: trust {directory / (new.key_id + '.pub')} on "
              f"the coordinator's host (`trainmedic keys trust {new.key_id}.pub --node {node}`), then run "
              "this again to sign with it")
        return 0
    if announce:
        _announce(old, new, node)
    keyring.rotate_key(directory, time.time(), role, expected=old.key_id)
    print(f"{role} signing key {new.key_id} replaces {old.key_id} (its private key deleted); the node's "
          "executor signs with it from its next report, its ranks keep running"
          + (f"; announced on the acks topic, signed by {old.key_id}: the coordinator trusts {new.key_id} "
             f"for {node} from that record on, and {old.key_id} for {ROTATION_GRACE_S:g} s more"
             if announce else ""))
    return 0


def _announce(old: SigningKey, new: SigningKey, node: str) -> None:
    """`new` announced as node `node`'s key, signed by `old`, with the node's executor credentials; a
    TrainmedicError when Kafka did not take it, or took it at a time the coordinator would refuse."""
    from trainmedic.bus.producer import EventProducer
    from trainmedic.bus.settings import KafkaSettings
    from trainmedic.recovery.coordinator.provenance import MAX_NODE_SKEW_S
    from trainmedic.recovery.join_token import public_key_model
    from trainmedic.schemas import NodeKeyRotated

    settings = KafkaSettings.from_env(role="executor")
    now = time.time()
    rotation = old.sign(NodeKeyRotated(ts=now, node=node, key=public_key_model(new.private.public_key()),
                                       deployment=settings.topic_prefix))
    appended: list[int] = []
    with EventProducer(settings, client_id=settings.topics.owned(f"keys-{node}")) as producer:
        producer.send(settings.topics.acks, rotation, key=node,
                      on_delivery=lambda err, msg: None if err else appended.append(msg.timestamp()[1]))
    if appended and appended[0] > 0 and abs(appended[0] / 1000 - now) > MAX_NODE_SKEW_S:
        raise ConfigError(f"this host's clock is {appended[0] / 1000 - now:+.0f} s off the broker's: the "
                          f"coordinator refuses the rotation (at most {MAX_NODE_SKEW_S:g} s); set the clock "
                          f"right (NTP) and run this again (the same new key {new.key_id} is announced; "
                          f"{old.key_id} still signs)")


def _where(role: str, key_id: str) -> str:
    """Where the new public key must go."""
    if role == keyring.COORDINATOR:
        return (f"copy the .pub to every executor's machine (and any other coordinator's) and run "
                f"`trainmedic keys trust {key_id}.pub --role coordinator` there")
    return (f"unless this is the coordinator's keys folder, copy the .pub to its machine and run "
            f"`trainmedic keys trust {key_id}.pub {keyring.role_flag(role)}` there")


def _switch(role: str) -> str:
    """When the new key starts signing."""
    return {"coordinator": "then restart the coordinator to sign with it",
            "operator": "the CLIs sign with it from their next call"}.get(
        role, "the node's executor signs its acks with it from its next one (no restart)")


def _revoke(directory: Path, revoked: keyring.Revoked) -> int:
    private = "its private key deleted" if revoked.private_deleted else "no private key of it here"
    print(f"key {revoked.key_id} ({revoked.role or 'no role'}) revoked in {directory} at "
          f"{keyring.utc(revoked.at)} UTC ({private}): refused here from the verifiers' next look at the "
          f"folder (no restart; also when it was the last key of its role), even if its .pub is copied in "
          f"again; revoke it on every machine that trusts it")
    return 0


def _sync(args: argparse.Namespace, directory: Path) -> int:
    from trainmedic.registrar_client import sync

    bootstrap = args.bootstrap or os.environ.get("TRAINMEDIC_KAFKA_BOOTSTRAP")
    if not bootstrap:
        raise ConfigError("--bootstrap HOST:PORT is needed: the broker, whose host runs the registrar")
    ca = credentials_dir() / "ca.pem"
    try:
        ca_pem = ca.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read {ca} (this host's CA, from its join): {err.strerror or err}") \
            from None
    synced = sync(bootstrap, args.registrar_port, ca_pem, directory, time.time())
    print(f"keys of the broker's host: {len(synced.trusted)} trusted here anew "
          f"({', '.join(synced.trusted) or '-'}), {len(synced.revoked)} revoked "
          f"({', '.join(synced.revoked) or '-'})"
          + (f", {len(synced.skipped)} passed over ({', '.join(synced.skipped)}: the log above says why)"
             if synced.skipped else ""))
    return 0


def _list(directory: Path, keys: list[keyring.KeyInfo]) -> int:
    if not keys:
        print(f"no keys in {directory}: run `trainmedic keys generate`", file=sys.stderr)
        return 1
    width = max(len("ROLE"), *(len(key.role or "-") for key in keys)) + 2
    print(f"{'KEY ID':<18}{'ROLE':<{width}}{'TRUST':<10}{'KIND':<9}{'CREATED (UTC)':<22}{'SIGNS':<7}PRIVATE")
    for key in keys:
        created = "-" if key.created is None else keyring.utc(key.created)
        trust = "REVOKED" if key.revoked is not None else "NO-ROLE" if key.role is None else "trusted"
        signs = "yes" if key.signing else ""
        private = "here" if key.private else ""
        when = "" if key.revoked is None else f"  (revoked {keyring.utc(key.revoked)} UTC)"
        print(f"{key.key_id:<18}{key.role or '-':<{width}}{trust:<10}{key.kind:<9}{created:<22}{signs:<7}"
              f"{private:<7}{when}".rstrip())
    if any(key.role is None and key.revoked is None for key in keys):
        print("NO-ROLE: an ID.pub copied in without a role, trusted for nothing: `trainmedic keys trust "
              "ID.pub --role coordinator|operator` or `--node NAME`, or delete it", file=sys.stderr)
    return 0


def add_operator_arguments(parser: argparse.ArgumentParser) -> None:
    """--keys-dir and --insecure of a CLI that publishes what an operator signs."""
    parser.add_argument("--keys-dir", type=Path, metavar="DIR",
                        help="the keys folder holding the operator key that signs (default "
                             "$TRAINMEDIC_HOME/keys; `trainmedic keys generate --role operator`)")
    parser.add_argument("--insecure", action="store_true",
                        help="publish unsigned (only a coordinator run with --insecure folds it)")


def operator_key(args: argparse.Namespace, prog: str):
    """The operator's signing key from --keys-dir (or its default); None with --insecure, after a
    warning on stderr. A ConfigError says what to run when there is none."""
    if args.insecure:
        if args.keys_dir is not None:
            raise ConfigError(f"--insecure and --keys-dir ({args.keys_dir}) exclude each other: drop "
                              "--insecure to sign with its operator key, or drop --keys-dir to publish "
                              "unsigned")
        print(f"{prog}: INSECURE: publishing UNSIGNED; a coordinator that checks signatures dead-letters it",
              file=sys.stderr)
        return None
    return keyring.load_signing(args.keys_dir or keyring.default_dir(), keyring.OPERATOR)
