"""A rank that joins its generation's process group and holds it for a while, so that a stranger can
try the job's store meanwhile (issue 42, D1 and D2)."""

import time

from trainmedic.runtime import init_from_env

runtime = init_from_env()
print("joined", flush=True)
time.sleep(20)
runtime.close()
