"""A service that leaves in steps (`trainmedic node`): the first SIGTERM or SIGINT starts its leave,
a second ends it at once."""

from __future__ import annotations

import os
import signal
import threading

from trainmedic.bus.signals import leave_on_signals


def test_the_first_signal_leaves_and_the_second_stops() -> None:
    leave, stop = threading.Event(), threading.Event()
    before = signal.getsignal(signal.SIGTERM)
    with leave_on_signals(leave, stop):
        os.kill(os.getpid(), signal.SIGTERM)
        assert leave.is_set() and not stop.is_set()
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.is_set()
    assert signal.getsignal(signal.SIGTERM) is before
