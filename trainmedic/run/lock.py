"""One `trainmedic run` per home at a time: a second one would share its executors' state and could
adopt or stop the first's ranks (docs/run.md)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class RunBusy(Exception):
    """Another run holds the home; the message says which and what to do."""


@contextmanager
def only_run(home: Path, job: str) -> Iterator[None]:
    """Hold `home`/run/lock while this run lives (the kernel lets go when the process dies, however)."""
    path = home / "run" / "lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("a+", encoding="utf-8")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read(200).strip() or "a process"
            raise RunBusy(
                f"another `trainmedic run` is using {home} ({holder}): wait for it to end, stop it "
                "(Ctrl-C in its terminal), or give this run a home and a broker port of its own: "
                "TRAINMEDIC_HOME=DIR TRAINMEDIC_BROKER_PORT=PORT trainmedic run ...") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}, job {job}")
        handle.flush()
        yield
    finally:
        handle.close()
