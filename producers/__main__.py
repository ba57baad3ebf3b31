"""`python -m producers`: `trainmedic gpu`, for hosts without the entry point."""

import sys

from bus.entry import run_command
from producers import gpu_cli

sys.exit(run_command(gpu_cli, "python -m producers"))
