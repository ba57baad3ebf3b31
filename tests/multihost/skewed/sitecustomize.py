"""A host's clock skew on the multi-host bed (tests/multihost/bed.py `Bed.skew`): Python, started with
this folder on PYTHONPATH and TRAINMEDIC_BED_SKEW_S set, reads a wall clock that many seconds off
(time.time, time.time_ns: every timestamp trainmedic writes, and its logs'). Its monotonic clock is
left alone, as on a host whose clock is off. libfaketime cannot do this here: with its monotonic clock
faked too, librdkafka's timed waits went wrong (2 heartbeats in 12 s); with it left alone, Python's
time.sleep failed (clock_nanosleep: EINVAL)."""

import os
import time

_SKEW_S = float(os.environ.get("TRAINMEDIC_BED_SKEW_S") or 0.0)
if _SKEW_S:
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _SKEW_S
    time.time_ns = lambda: _time_ns() + int(_SKEW_S * 1e9)
