"""`python -m PACKAGE` entry points: one service's command without the `trainmedic` front."""

from __future__ import annotations

import argparse
import logging
from types import ModuleType

LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def configure_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format=LOG_FORMAT)


def run_command(command: ModuleType, prog: str, argv: list[str] | None = None) -> int:
    """Parse `argv` with the command module's `add_arguments` and run it, logging as `trainmedic` does."""
    parser = argparse.ArgumentParser(prog=prog, description=command.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    command.add_arguments(parser)
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    return command.run(args)
