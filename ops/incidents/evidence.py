"""Evidence lines ("<unix seconds> what it saw") and instants as people read them: UTC clock times
with their offset from the earliest evidence (docs/detection.md)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_STAMP = re.compile(r"(\d+\.\d{3}) (.*)", re.DOTALL)
# An instant inside a line: unix seconds with milliseconds, from 1973 to 5138 (a duration never
# has nine digits before its point).
_INSTANT = re.compile(r"(?<![\d.])\d{9,11}\.\d{3}(?!\d)")


def stamped(line: str) -> tuple[float | None, str]:
    """The time a line says it was seen, and the rest of it; None and the line where it says none."""
    found = _STAMP.fullmatch(line)
    return (float(found[1]), found[2]) if found else (None, line)


def clock(ts: float) -> str:
    """An instant as UTC time of day, to the millisecond: 14:03:07.412."""
    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%S.%f")[:-3]
    except (OverflowError, OSError, ValueError):
        return repr(ts)


def offset(seconds: float) -> str:
    """A signed offset in seconds, to the millisecond: +2.310s, -0.500s (never -0.000s)."""
    shown = round(seconds, 3)
    return f"{'-' if shown < 0 else '+'}{abs(shown):.3f}s"


def readable(text: str, origin: float) -> str:
    """`text` with each unix instant in it shown as its clock time and offset from `origin`."""
    def human(found: re.Match[str]) -> str:
        ts = float(found[0])
        return f"{clock(ts)} ({offset(ts - origin)})"
    return _INSTANT.sub(human, text)


def for_people(line: str, origin: float) -> str:
    """One evidence line to read on its own (an alert): its time as clock time and offset from
    `origin`, then what it says, instants in it made readable."""
    ts, text = stamped(line)
    text = readable(text, origin)
    return text if ts is None else f"{clock(ts)} ({offset(ts - origin)}) {text}"
