"""`python -m recovery`: `trainmedic coordinator`, for hosts without the entry point."""

import sys

from bus.entry import run_command
from recovery.coordinator import cli

sys.exit(run_command(cli, "python -m recovery"))
