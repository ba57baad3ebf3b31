"""Snapshots written behind the training loop: the step pays for the copy to host memory only
(docs/executor.md, "Sharded state (FSDP2, HSDP)", "Written behind the step").
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class SnapshotWriter:
    """One write at a time, in a thread of its own: a new one first waits for the last, so at most
    one extra copy of the shards is held. The thread is not a daemon: a script that ends without
    `Runtime.close` still lands its last snapshot."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def submit(self, write: Callable[[], object]) -> None:
        """Run `write` in the background once the previous write is done."""
        self.wait()
        self._thread = threading.Thread(target=self._run, args=(write,), name="snapshot-writer")
        self._thread.start()

    def wait(self) -> None:
        """Until no write is in flight; raises the error of a write that failed."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _run(self, write: Callable[[], object]) -> None:
        try:
            write()
        except BaseException as err:  # handed to the training thread at its next wait
            self._error = err
