"""A rank that says it waits alive to re-form (`worker_waiting`), then reports an error of its own and
runs on, never re-forming (issue 42, E): a restart must stop it, not keep it as a survivor."""

import time

from trainmedic.runtime.hook import Hook

hook = Hook.from_env()
hook.started()
hook.waiting()
hook.error(RuntimeError("failed after it said it waits"))
hook.close(10.0)  # flushed: what it said is with the executor
print("reported", flush=True)
time.sleep(300)
