"""A run's record names its topic prefix and broker, so operator commands find the run they are asked
about (or the newest) from any directory, without an exported prefix."""

from __future__ import annotations

from pathlib import Path

from trainmedic.ops.run_records import RunRecord, find_run, record_path, record_run


def test_the_named_run_else_the_newest(tmp_path: Path) -> None:
    assert find_run(tmp_path) is None and find_run(tmp_path, "a") is None
    record_run(tmp_path, "a", "run-aaaaaa.", "127.0.0.1:9092", started=100.0)
    record_run(tmp_path, "b", "run-bbbbbb.", "127.0.0.1:19092", started=200.0)
    assert find_run(tmp_path, "a") == RunRecord("a", "run-aaaaaa.", "127.0.0.1:9092", 100.0)
    assert find_run(tmp_path).job == "b"
    assert find_run(tmp_path, "c") is None


def test_an_unreadable_record_is_no_record(tmp_path: Path) -> None:
    record_run(tmp_path, "a", "run-aaaaaa.", "127.0.0.1:9092", started=100.0)
    record_path(tmp_path, "b").parent.mkdir(parents=True)
    record_path(tmp_path, "b").write_text('{"job": "b", "prefix": 7')
    assert find_run(tmp_path).job == "a"
    assert find_run(tmp_path, "b") is None
