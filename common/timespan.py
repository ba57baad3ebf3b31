"""The one parser of time spans (`1.5`, `500ms`, `2h`) and instants (ISO 8601, or a span ago) that
every command and spec uses. Pure: `now` is passed in; `instant_arg` reads its clock at conversion.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from trainmedic.common.errors import ConfigError

__all__ = ["duration_arg", "env_seconds", "instant_arg", "parse_duration", "parse_instant"]

_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SPAN = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?$", re.ASCII)
_DURATIONS = "a number of seconds (1.5) or a number with a unit ms, s, m, h or d (500ms, 30s, 10m, 2h, 1d)"
_INSTANTS = "an ISO 8601 time (2025-05-01T12:00:00Z; no zone means UTC) or a span ago (30s, 10m, 2h, 1d)"


def parse_duration(text: str) -> float:
    """Seconds in `text`: a non-negative number of seconds (`1.5`) or a number with a unit (`500ms`,
    `30s`, `10m`, `2h`, `1.5d`); raises ValueError naming the accepted forms."""
    match = _SPAN.match(text.strip())
    seconds = float(match[1]) * _UNIT_S[match[2] or "s"] if match else math.nan
    if not math.isfinite(seconds):
        raise ValueError(f"{text!r} is not a duration: give {_DURATIONS}")
    return seconds


def env_seconds(env: Mapping[str, str], name: str) -> float | None:
    """The positive duration in the variable `name` (seconds as Python writes a float, or a number
    with a unit), None when unset or empty; raises ConfigError naming the variable for anything
    else (zero, inf and nan included)."""
    raw = env.get(name)
    if not raw:
        return None
    try:
        value = float(raw)  # what a program writes: repr(1e-05) has no form parse_duration reads
    except ValueError:
        try:
            value = parse_duration(raw)
        except ValueError as err:
            raise ConfigError(f"{name}: {err}") from None
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{name}={raw!r} must be a finite number of seconds above 0")
    return value


def parse_instant(text: str, now: float) -> float:
    """Unix seconds of an ISO 8601 time (UTC when it names no zone), or of a span (with its unit)
    before `now`.

    A bare number is refused rather than read as seconds ago: `20250501` is an ISO date, and
    a Unix time would silently mean something else.
    """
    stripped = text.strip()
    match = _SPAN.match(stripped)
    if match and match[2]:
        return now - parse_duration(stripped)
    try:
        moment = datetime.fromisoformat(stripped)
    except ValueError:
        raise ValueError(f"{text!r} is not a time: give {_INSTANTS}") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def duration_arg(text: str) -> float:
    """An argparse type: seconds, as `parse_duration` reads them."""
    try:
        return parse_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def instant_arg(clock: Callable[[], float]) -> Callable[[str], float]:
    """An argparse type: Unix seconds, as `parse_instant` reads them with `clock()` as now."""
    def instant(text: str) -> float:
        try:
            return parse_instant(text, clock())
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return instant
