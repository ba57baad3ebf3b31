"""`python -m streams`: the detector service, as `trainmedic detector`."""

import argparse
import sys

from streams import cli

parser = argparse.ArgumentParser(prog="python -m streams", description=cli.__doc__)
cli.add_arguments(parser)
sys.exit(cli.run(parser.parse_args()))
