"""Write the event contract as JSON Schema files, one per topic plus the planner's documents."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    export = sub.add_parser("export", help="write one JSON Schema file per topic into DIR")
    export.add_argument("directory", type=Path, metavar="DIR")


def run(args: argparse.Namespace) -> int:
    from trainmedic.schemas.export import export

    for path in export(args.directory):
        print(path)
    return 0
