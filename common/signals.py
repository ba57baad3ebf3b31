"""Stopping a long-running service cleanly: SIGTERM and SIGINT end its loop instead of the process,
or, for a service that winds down in steps, start its leave first and end it at a second signal;
and whether a process still runs."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """While inside, SIGTERM and SIGINT set `stop` (so the loop ends and flushes) instead of killing."""

    def handler(signum: int, _frame: object) -> None:
        log.info("%s: stopping", signal.Signals(signum).name)
        stop.set()

    with _handling(handler):
        yield


@contextmanager
def leave_on_signals(leave: threading.Event, stop: threading.Event) -> Iterator[None]:
    """While inside, a first SIGTERM or SIGINT sets `leave` (a planned shutdown, wound down in order);
    a second sets `stop` as well (leave at once)."""

    def handler(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if leave.is_set():
            log.warning("%s again: leaving at once", name)
            stop.set()
        else:
            log.info("%s: leaving (%s again to leave at once)", name, name)
            leave.set()

    with _handling(handler):
        yield


@contextmanager
def _handling(handler: Callable[[int, object], None]) -> Iterator[None]:
    """`handler` for SIGTERM and SIGINT while inside; the previous handlers after.

    Python runs a signal handler in the main thread between two bytecodes, perhaps while that thread
    holds a lock the handler wants: `stop.wait()` holds its condition's lock at moments, and
    `stop.set()` in the handler then waits for it forever (a producer that never exits after
    SIGTERM). So the handler only writes the signal's number to a pipe, and a thread of its own reads
    it and calls `handler`, taking whatever locks it likes.
    """
    read_fd, write_fd = os.pipe()

    def relay() -> None:
        with open(read_fd, "rb", buffering=0) as pipe:
            while signum := pipe.read(1):
                try:
                    handler(signum[0], None)
                except Exception:  # the relay must outlive a failed handler: the next signal needs it
                    log.exception("the handler of signal %d failed", signum[0])

    def on_signal(signum: int, _frame: object) -> None:
        os.write(write_fd, bytes([signum]))

    previous: dict[int, object] = {}
    thread = None
    try:  # a signal before the relay starts waits in the pipe
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)  # ValueError off the main thread
        starting = threading.Thread(target=relay, name="signals", daemon=True)
        starting.start()
        thread = starting  # it owns the read end from now on
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        os.close(write_fd)  # the relay hands on what came before, then ends
        if thread is None:
            os.close(read_fd)
        else:
            thread.join(timeout=5)


def alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (another user's counts; a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); /proc tells it apart.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (FileNotFoundError, IndexError):
        return True
