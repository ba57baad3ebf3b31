"""librdkafka's log lines, one per condition: a client that cannot reach its broker logs every failed
try (about 20 a second, ~580 lines in the 30 s before a command's own clear error). `Repeats` lets the
first line of a condition through and holds its repeats for `window_s`; the first after that passes
with how many it held, and `summary` gives the counts held so far (a client logs them when it is done
with). Pure: the clock is passed in.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

__all__ = ["SUMMARY", "Repeats", "condition"]

_RDKAFKA = re.compile(r"\w+ \[rdkafka#")  # "FAIL [rdkafka#producer-1] [thrd:...]: ..."
_VOLATILE = [
    (re.compile(r"rdkafka#(\w+)-\d+"), r"rdkafka#\1"),  # the client's instance number
    (re.compile(r"\(after \d+ms in state (\w+)(?:, \d+ identical error\(s\) suppressed)?\)"),
     r"(in state \1)"),
]
MAX_CONDITIONS = 1_000  # past it, the conditions seen start over
SUMMARY = "tm_repeats_summary"  # a record with this attribute set is a summary: it always passes


def condition(message: str) -> str:
    """What makes two of librdkafka's lines the same condition: the line less its volatile parts."""
    for pattern, replacement in _VOLATILE:
        message = pattern.sub(replacement, message)
    return message


class Repeats(logging.Filter):
    """A filter that lets through the first of librdkafka's lines of each condition (logger, level,
    `condition`) and holds the same ones for `window_s`; the first after that passes with the count
    held, and a new window starts. Any other record passes untouched."""

    def __init__(self, window_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()  # librdkafka's lines come from whichever thread polls
        # condition -> [window start, held, a line of it]
        self._seen: dict[tuple[str, int, str], list] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, SUMMARY, False):
            return True
        message = record.getMessage()
        if not _RDKAFKA.match(message):
            return True
        key, now = (record.name, record.levelno, condition(message)), self._clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen[0] < self.window_s:
                seen[1] += 1
                return False
            if len(self._seen) >= MAX_CONDITIONS:
                self._seen.clear()
            self._seen[key] = [now, 0, message]
        if seen is not None and seen[1]:
            record.msg, record.args = f"{message} ({_more(seen[1], now - seen[0])})", ()
        return True

    def summary(self) -> list[tuple[str, int, str]]:
        """(logger name, level, line) for each condition with repeats held since its last line, which
        are counted as shown from then on."""
        now, out = self._clock(), []
        with self._lock:
            for (name, level, _), seen in self._seen.items():
                if seen[1]:
                    out.append((name, level, f"{seen[2]} ({_more(seen[1], now - seen[0])})"))
                    seen[1] = 0
        return out


def _more(held: int, seconds: float) -> str:
    return f"and {held} more like it" + (f" in the last {seconds:.0f} s" if seconds >= 1 else "")
