"""A stand-in rank for the warm-launcher tests: prints what it was given, then exits as told."""

import os
import sys
import time

print(f"argv={sys.argv[1:]} probe={os.environ.get('PROBE')} pgid_is_pid={os.getpgid(0) == os.getpid()}",
      flush=True)
if "--sleep" in sys.argv:
    time.sleep(60)
sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
