"""Create, rotate and list the Ed25519 keys that sign the coordinator's commands.

`generate` writes a first key pair to the keys folder and makes it the signing key (the
private key file is mode 0600). `rotate` writes a new pair, makes it the signing key and
deletes the old private key, keeping the old public key trusted so that commands signed
before the rotation still verify; restart the coordinator to sign with the new key, and copy
the new ID.pub to every executor (before the restart). `list` prints each key: id, kind,
created, whether it signs, whether its private key is here.

The folder is --keys-dir, else $TRAINMEDIC_HOME/keys (TRAINMEDIC_HOME defaults to
./.trainmedic), the same default the coordinator and executors use. Executors need only
the *.pub files; never copy a .key file off the coordinator's machine. See docs/security.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text in (("generate", "write a first key pair and make it the signing key"),
                       ("rotate", "write a new signing key; keep the old public key trusted"),
                       ("list", "print every key: id, kind, created, signing, private key here")):
        action = sub.add_parser(name, help=text, description=text)
        action.add_argument("--keys-dir", type=Path, metavar="DIR",
                            help="the keys folder (default $TRAINMEDIC_HOME/keys)")


def run(args: argparse.Namespace) -> int:
    from bus.errors import ConfigError
    from recovery import keyring

    directory = args.keys_dir or keyring.default_dir()
    try:
        if args.action == "generate":
            key_id = keyring.generate_key(directory, time.time())
            print(f"signing key {key_id}: private {directory / (key_id + '.key')} (0600), "
                  f"public {directory / (key_id + '.pub')}; copy the .pub to every executor's keys folder")
        elif args.action == "rotate":
            old, new = keyring.rotate_key(directory, time.time())
            print(f"signing key {new} replaces {old} (its private key deleted, its public key still "
                  f"trusted); copy {directory / (new + '.pub')} to every executor, then restart the "
                  "coordinator")
        else:
            return _list(directory, keyring.list_keys(directory))
    except ConfigError as err:
        print(f"trainmedic keys: {err}", file=sys.stderr)
        return 2
    return 0


def _list(directory: Path, keys: list) -> int:
    if not keys:
        print(f"no keys in {directory}: run `trainmedic keys generate`", file=sys.stderr)
        return 1
    print(f"{'KEY ID':<18}{'KIND':<9}{'CREATED (UTC)':<22}{'SIGNS':<7}PRIVATE")
    for key in keys:
        created = "-" if key.created is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(key.created))
        print(f"{key.key_id:<18}{key.kind:<9}{created:<22}{'yes' if key.signing else '':<7}"
              f"{'here' if key.private else ''}")
    return 0
