"""`trainmedic record` arguments: times, spans and offsets, and the errors a user sees."""

from __future__ import annotations

import pytest

from trainmedic.cli import main
from trainmedic.streams.record import parse_start_offset


def test_start_offsets():
    assert [parse_start_offset(t) for t in ("earliest", "latest", "0", "42")] == ["earliest", "latest", 0, 42]
    for bad in ("-1", "first", "1.5"):
        with pytest.raises(ValueError):
            parse_start_offset(bad)


@pytest.mark.parametrize("args", [
    [],  # no start
    ["--from-time", "10m", "--from-offset", "earliest"],
    ["--from-time", "yesterday"],
    ["--from-offset", "earliest", "--duration", "-5m"],
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
    (["--from-offset", "earliest", "--duration", "0s"], "--duration must be longer than 0s"),
])
def test_inconsistent_times_exit_2(args, says, capsys):
    assert main(["record", *args, "--bootstrap", "127.0.0.1:1"]) == 2
    assert says in capsys.readouterr().err


def test_an_unreachable_broker_is_one_line_and_exit_1(capsys):
    assert main(["record", "--from-offset", "earliest", "--bootstrap", "127.0.0.1:1",
                 "--timeout-s", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no Kafka broker answered at 127.0.0.1:1 within 1s" in err[0]
