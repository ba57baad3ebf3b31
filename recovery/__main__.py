"""`python -m recovery`: the recovery coordinator, as `trainmedic coordinator`."""

import sys

from trainmedic.cli import main

sys.exit(main(["coordinator", *sys.argv[1:]]))
