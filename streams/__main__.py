"""`python -m streams`: `trainmedic detector`, for hosts without the entry point."""

import sys

from bus.entry import run_command
from streams import cli

sys.exit(run_command(cli, "python -m streams"))
