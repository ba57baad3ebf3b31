"""A failed rank's last output (issue 33): from its traceback on, escaped, bounded, read at the log's end."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

from trainmedic.recovery.executor.core.output_tail import READ_BYTES, output_tail
from trainmedic.recovery.executor.supervisor import read_tail
from trainmedic.schemas.telemetry import MAX_TAIL_CHARS, MAX_TAIL_LINES, last_lines

IMPORT_ERROR = b"""loading data
Traceback (most recent call last):
  File "/tmp/train.py", line 1, in <module>
    import no_such_module
ModuleNotFoundError: No module named 'no_such_module'
"""


def test_the_tail_starts_at_the_last_traceback() -> None:
    end = b"step 1\nTraceback (most recent call last):\nValueError: first\nretrying\n" + IMPORT_ERROR
    tail = output_tail(end, whole=True)
    assert tail.splitlines()[0] == "Traceback (most recent call last):"
    assert tail.splitlines()[-1] == "ModuleNotFoundError: No module named 'no_such_module'"
    assert "first" not in tail and "loading data" not in tail


def test_without_a_traceback_the_tail_is_the_last_lines_and_nothing_written_is_none() -> None:
    end = "".join(f"line {n}\n" for n in range(100)).encode()
    tail = output_tail(end, whole=True)
    assert tail.splitlines() == [f"line {n}" for n in range(100 - MAX_TAIL_LINES, 100)]
    assert output_tail(b"", whole=True) is None
    assert output_tail(b"\n\n", whole=True) is None


def test_the_tail_is_bounded_in_characters_and_starts_at_a_line() -> None:
    end = b"Traceback (most recent call last):\n" + b"".join(b"x" * 300 + b"\n" for _ in range(30))
    tail = output_tail(end, whole=True)
    assert len(tail) <= MAX_TAIL_CHARS
    assert set(tail.splitlines()) == {"x" * 300}  # whole lines only
    assert len(last_lines("y" * 10_000)) == MAX_TAIL_CHARS  # one endless line: its end


def test_control_characters_and_invalid_utf8_are_escaped() -> None:
    end = b"Traceback (most recent call last):\nError: \x1b]0;owned\x07 \xe2\x80\xae\xff\r\n"
    tail = output_tail(end, whole=True)
    assert tail == "Traceback (most recent call last):\nError: \\x1b]0;owned\\x07 \\u202e\ufffd"


def test_a_read_that_begins_mid_line_drops_that_line() -> None:
    assert output_tail(b"f a line\nlast words\n", whole=False) == "last words"
    assert output_tail(b"one long line", whole=False) == "one long line"


def test_a_huge_log_is_read_only_at_its_end(tmp_path: Path) -> None:
    log = tmp_path / "g0-rank0.log"
    with open(log, "wb") as out:
        out.truncate(1 << 30)  # a sparse gigabyte of NULs, then the failure
        out.seek(1 << 30)
        out.write(IMPORT_ERROR)
    fd = os.open(log, os.O_RDONLY)
    tracemalloc.start()
    try:
        tail = read_tail(fd, "rank 0")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        os.close(fd)
    assert tail.splitlines() == IMPORT_ERROR.decode().splitlines()[1:]
    assert peak < 16 * READ_BYTES  # not the gigabyte


def test_a_log_that_cannot_be_read_has_no_tail(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)  # a directory: pread fails
    try:
        assert read_tail(fd, "rank 0") is None
    finally:
        os.close(fd)
