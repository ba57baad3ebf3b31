"""`trainmedic record` arguments: times, spans and offsets, and the errors a user sees."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from streams.record import parse_duration, parse_instant, parse_start_offset
from trainmedic.cli import main

NOW = datetime(2025, 5, 1, 12, 0, tzinfo=UTC).timestamp()


def test_spans_and_instants():
    assert [parse_duration(t) for t in ("30s", "10m", "2h", "1.5d")] == [30, 600, 7200, 129600]
    assert parse_instant("10m", NOW) == NOW - 600
    assert parse_instant("2025-05-01T11:00:00Z", NOW) == NOW - 3600
    assert parse_instant("2025-05-01T11:00:00", NOW) == NOW - 3600  # no offset: UTC
    assert parse_instant("2025-05-01T13:00:00+02:00", NOW) == NOW - 3600
    for bad in ("0s", "-5m", "10", "5 weeks", ""):
        with pytest.raises(ValueError):
            parse_duration(bad)
    with pytest.raises(ValueError):
        parse_instant("yesterday", NOW)


def test_start_offsets():
    assert [parse_start_offset(t) for t in ("earliest", "latest", "0", "42")] == ["earliest", "latest", 0, 42]
    for bad in ("-1", "first", "1.5"):
        with pytest.raises(ValueError):
            parse_start_offset(bad)


@pytest.mark.parametrize("args", [
    [],  # no start
    ["--from-time", "10m", "--from-offset", "earliest"],
    ["--from-time", "yesterday"],
    ["--from-offset", "earliest", "--duration", "0s"],
    ["--from-offset", "earliest", "--until", "1h", "--duration", "5m"],
])
def test_bad_arguments_exit_2(args, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["record", *args])
    assert stop.value.code == 2
    assert "trainmedic record: error:" in capsys.readouterr().err


@pytest.mark.parametrize("args, says", [
    (["--from-time", "2h", "--until", "3h"], "the end must come after the start"),
    (["--from-time", "2999-01-01T00:00:00Z"], "in the future"),
])
def test_inconsistent_times_exit_2(args, says, capsys):
    assert main(["record", *args, "--bootstrap", "127.0.0.1:1"]) == 2
    assert says in capsys.readouterr().err


def test_an_unreachable_broker_is_one_line_and_exit_1(capsys):
    assert main(["record", "--from-offset", "earliest", "--bootstrap", "127.0.0.1:1",
                 "--timeout-s", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no Kafka broker answered at 127.0.0.1:1 within 1s" in err[0]
