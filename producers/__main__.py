"""`python -m trainmedic.producers`: `trainmedic gpu`, for hosts without the entry point."""

import sys

from trainmedic.common.entry import run_command
from trainmedic.producers import gpu_cli

sys.exit(run_command(gpu_cli, "python -m trainmedic.producers"))
