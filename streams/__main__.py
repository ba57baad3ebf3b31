"""`python -m trainmedic.streams`: `trainmedic detector`, for hosts without the entry point."""

import sys

from trainmedic.common.entry import run_command
from trainmedic.streams import cli

sys.exit(run_command(cli, "python -m trainmedic.streams"))
