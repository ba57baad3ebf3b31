"""trainmedic.common.timespan: the one grammar of durations and instants, what it accepts and what it says."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

import pytest

from trainmedic.common.errors import ConfigError
from trainmedic.common.timespan import duration_arg, env_seconds, instant_arg, parse_duration, parse_instant

NOW = datetime(2025, 5, 1, 12, 0, tzinfo=UTC).timestamp()
DURATION_FORMS = "a number of seconds (1.5) or a number with a unit ms, s, m, h or d"
INSTANT_FORMS = "an ISO 8601 time (2025-05-01T12:00:00Z; no zone means UTC) or a span ago"


@pytest.mark.parametrize(("text", "seconds"), [
    ("0", 0.0), ("1.5", 1.5), ("1.", 1.0), (".25", 0.25), ("0s", 0.0), (".25s", 0.25),
    ("500ms", 0.5), ("30s", 30.0), ("10m", 600.0), ("2h", 7200.0), ("1.5d", 129600.0),
    ("10 m", 600.0), (" 30s\n", 30.0),
])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", [
    "", " ", "s", "-1", "-5m", "+5s", "1e3", "nan", "inf", "1w", "5 weeks", "1h30m", "10M", "1,5s",
    "٣s", "9" * 400,
])
def test_rejected_durations_say_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_duration(text)
    assert str(err.value) == f"{text!r} is not a duration: give {DURATION_FORMS} (500ms, 30s, 10m, 2h, 1d)"


@pytest.mark.parametrize(("text", "ts"), [
    ("10m", NOW - 600), ("500ms", NOW - 0.5), ("0s", NOW), (" 2h ", NOW - 7200), ("1.5d", NOW - 129600),
    ("2025-05-01T11:00:00Z", NOW - 3600),
    ("2025-05-01T11:00:00", NOW - 3600),  # no zone: UTC
    ("2025-05-01T13:00:00+02:00", NOW - 3600),
    ("2025-05-01 11:30", NOW - 1800),
    ("2025-05-01", NOW - 43200),
    ("20250501", NOW - 43200),  # ISO basic date, not 20250501 seconds ago
])
def test_instants(text: str, ts: float) -> None:
    assert parse_instant(text, NOW) == ts


@pytest.mark.parametrize("text", ["", "yesterday", "600", "1.5", "-10m", "now", "2025-13-01T00:00:00"])
def test_rejected_instants_say_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_instant(text, NOW)
    assert str(err.value) == f"{text!r} is not a time: give {INSTANT_FORMS} (30s, 10m, 2h, 1d)"


def test_argparse_types_convert_and_report_the_parsers_message(capsys) -> None:
    clock_reads = []

    def clock() -> float:
        clock_reads.append(NOW)
        return NOW

    parser = argparse.ArgumentParser(prog="tm")
    parser.add_argument("--every", type=duration_arg)
    parser.add_argument("--since", type=instant_arg(clock))
    args = parser.parse_args(["--every", "250ms", "--since", "1h"])
    assert (args.every, args.since, len(clock_reads)) == (0.25, NOW - 3600, 1)
    with pytest.raises(SystemExit):
        parser.parse_args(["--every", "soon"])
    assert "tm: error: argument --every: 'soon' is not a duration: give" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["--since", "yesterday"])
    assert "tm: error: argument --since: 'yesterday' is not a time: give" in capsys.readouterr().err


def test_a_duration_in_the_environment_is_positive_seconds_or_a_clear_error() -> None:
    assert env_seconds({"T_S": "90.0"}, "T_S") == 90.0 and env_seconds({"T_S": "2m"}, "T_S") == 120.0
    assert env_seconds({"T_S": "1e-05"}, "T_S") == 1e-05  # as repr writes a float
    assert env_seconds({}, "T_S") is None and env_seconds({"T_S": ""}, "T_S") is None
    for raw in ("0", "-1", "nan", "inf", "soon"):
        with pytest.raises(ConfigError, match="T_S"):
            env_seconds({"T_S": raw}, "T_S")
