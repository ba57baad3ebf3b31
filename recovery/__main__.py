"""`python -m trainmedic.recovery`: `trainmedic coordinator`, for hosts without the entry point."""

import sys

from trainmedic.common.entry import run_command
from trainmedic.recovery.coordinator import cli

sys.exit(run_command(cli, "python -m trainmedic.recovery"))
