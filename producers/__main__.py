"""`python -m producers`: the GPU producer (`trainmedic gpu`), for hosts without the entry point."""

from __future__ import annotations

import argparse
import logging
import sys

from producers import gpu_cli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m producers", description=gpu_cli.__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    gpu_cli.add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    return gpu_cli.run(args)


if __name__ == "__main__":
    sys.exit(main())
