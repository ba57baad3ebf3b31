"""A rank for the warm-launcher tests that reports through the in-band hook and never closes it:
its reports reach the executor only if the process flushes the hook on its way out, as interpreter exit does.

PROBE_END says how it ends: `raise` (an uncaught exception), `exit` (sys.exit(3) after reporting an
error) or `return` (falls off the end after one step).
"""

import os
import sys

from trainmedic.runtime.hook import Hook

hook = Hook.from_env()
hook.started()
end = os.environ["PROBE_END"]
if end == "raise":
    with hook.capture():
        raise RuntimeError("boom in a warm rank")
elif end == "exit":
    hook.error(ValueError("bad batch in a warm rank"))
    sys.exit(3)
else:
    hook.step(0, 0.01)
