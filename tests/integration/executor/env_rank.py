"""A rank that writes what it can see of its environment to the file named by its argument, then
exits: `os.environ` (what the program reads), /proc/self/environ (the block it was started
with, which a warm-forked rank inherits from the fork server's memory), its working directory
and where it looks for modules first."""

import json
import os
import sys
from pathlib import Path

block = Path("/proc/self/environ").read_bytes().decode(errors="replace")
Path(sys.argv[1]).write_text(json.dumps({"environ": dict(os.environ), "proc": block, "cwd": os.getcwd(),
                                         "path0": sys.path[0]}))
