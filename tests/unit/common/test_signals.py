"""Stopping a service by signal: the first SIGTERM or SIGINT starts a leave, a second ends it at once;
and a signal that comes while the main thread holds the stop event's lock still stops it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

from trainmedic.common.signals import leave_on_signals, stop_on_signals


def test_the_first_signal_leaves_and_the_second_stops() -> None:
    leave, stop = threading.Event(), threading.Event()
    before = signal.getsignal(signal.SIGTERM)
    with leave_on_signals(leave, stop):
        os.kill(os.getpid(), signal.SIGTERM)
        assert leave.wait(5) and not stop.is_set()
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.wait(5)
    assert signal.getsignal(signal.SIGTERM) is before


# The main thread takes the event's own lock (as Event.wait does for a moment each time it waits),
# and the signal's handler runs while it holds it. A handler that set the event itself would wait for
# that lock forever: the process never ends.
SIGNAL_WHILE_LOCKED = textwrap.dedent("""
    import os, signal, threading, time
    from trainmedic.common.signals import stop_on_signals
    stop = threading.Event()
    with stop_on_signals(stop):
        with stop._cond:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
        print("stopped" if stop.wait(5) else "not stopped")
""")


def test_a_signal_while_the_stop_events_lock_is_held_still_stops() -> None:
    try:
        done = subprocess.run([sys.executable, "-c", SIGNAL_WHILE_LOCKED], capture_output=True, text=True,
                              timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError("the process hung in its signal handler") from None
    assert done.stdout.strip() == "stopped", done.stderr


def test_off_the_main_thread_it_refuses_and_leaves_no_pipe_open() -> None:
    before = len(os.listdir("/proc/self/fd"))
    failed: list[BaseException] = []

    def try_it() -> None:
        try:
            with stop_on_signals(threading.Event()):
                pass
        except ValueError as err:  # signal handlers are the main thread's alone
            failed.append(err)

    thread = threading.Thread(target=try_it)
    thread.start()
    thread.join(10)
    assert failed and len(os.listdir("/proc/self/fd")) == before
