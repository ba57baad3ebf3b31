"""Create, rotate, trust and list the Ed25519 keys that sign commands, jobs, node events and acks
(docs/security.md#keys).

Roles: `coordinator` (the default) signs commands; `operator` (--role operator) signs jobs and node
events; `node:NAME` (--node NAME) signs node NAME's acks. `generate` writes a role's first key pair
and makes it the signing key (private key mode 0600); `rotate` writes a new one and deletes the old
private key, keeping the old public key trusted; `trust FILE.pub` adds a public key made elsewhere
for a role; `list` prints each key. The folder is --keys-dir, else $TRAINMEDIC_HOME/keys. Never
copy a .key file to another machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from trainmedic.common.errors import ConfigError
from trainmedic.ops.prologue import run_command
from trainmedic.recovery import keyring


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text in (("generate", "write a first key pair of a role and make it the role's signing key"),
                       ("rotate", "write a new signing key of a role; keep the old public key trusted"),
                       ("trust", "copy a public key made elsewhere into the folder, trusted for a role"),
                       ("list", "print every key: id, role, kind, created, signing, private key here")):
        action = sub.add_parser(name, help=text, description=text)
        if name == "trust":
            action.add_argument("public", type=Path, metavar="ID.pub", help="the public key file (PEM)")
        if name != "list":
            role = action.add_mutually_exclusive_group(required=name == "trust")
            role.add_argument("--role", choices=("coordinator", "operator"),
                              help="coordinator (signs commands; the default) or operator (signs jobs and "
                                   "node events)")
            role.add_argument("--node", metavar="NAME", help="the key of node NAME (signs its acks)")
        action.add_argument("--keys-dir", type=Path, metavar="DIR",
                            help="the keys folder (default $TRAINMEDIC_HOME/keys)")


def run(args: argparse.Namespace) -> int:
    return run_command("keys", _run, args)


def _run(args: argparse.Namespace) -> int:
    directory = args.keys_dir or keyring.default_dir()
    if args.action == "list":
        return _list(directory, keyring.list_keys(directory))
    role = keyring.node_role(args.node) if args.node else args.role or keyring.COORDINATOR
    if args.action == "generate":
        key_id = keyring.generate_key(directory, time.time(), role)
        print(f"{role} signing key {key_id}: private {directory / (key_id + '.key')} (0600), "
              f"public {directory / (key_id + '.pub')}; {_where(role, key_id)}")
    elif args.action == "rotate":
        old, new = keyring.rotate_key(directory, time.time(), role)
        print(f"{role} signing key {new} replaces {old} (its private key deleted, its public key still "
              f"trusted); {_where(role, new)}; {_switch(role)}")
    else:
        key_id = keyring.trust_key(directory, args.public, role, time.time())
        print(f"key {key_id} trusted here as {role} ({directory / (key_id + '.pub')})")
    return 0


def _where(role: str, key_id: str) -> str:
    """Where the new public key must go."""
    if role == keyring.COORDINATOR:
        return "copy the .pub to every executor's keys folder"
    return (f"unless this is the coordinator's keys folder, copy the .pub to its machine and run "
            f"`trainmedic keys trust {key_id}.pub {keyring.role_flag(role)}` there")


def _switch(role: str) -> str:
    """When the new key starts signing."""
    return {"coordinator": "then restart the coordinator to sign with it",
            "operator": "the CLIs sign with it from their next call"}.get(
        role, "then restart the node's executor to sign its acks with it (its ranks keep running)")


def _list(directory: Path, keys: list) -> int:
    if not keys:
        print(f"no keys in {directory}: run `trainmedic keys generate`", file=sys.stderr)
        return 1
    width = max(len("ROLE"), *(len(key.role) for key in keys)) + 2
    print(f"{'KEY ID':<18}{'ROLE':<{width}}{'KIND':<9}{'CREATED (UTC)':<22}{'SIGNS':<7}PRIVATE")
    for key in keys:
        created = "-" if key.created is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(key.created))
        signs = "yes" if key.signing else ""
        print(f"{key.key_id:<18}{key.role:<{width}}{key.kind:<9}{created:<22}{signs:<7}"
              f"{'here' if key.private else ''}")
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
