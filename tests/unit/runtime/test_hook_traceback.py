"""A worker_error carries the exception's last traceback lines, bounded by the hook and again by the
executor's report check, which refuses a report too big for the channel (issue 33)."""

from __future__ import annotations

import json

import pytest

from tests.unit.runtime.test_hook import IDENTITY, ListSink
from trainmedic.recovery.executor.core.reports import (
    MAX_LINE,
    LaunchedRank,
    RankReports,
    Refused,
    ReportLimits,
    check,
)
from trainmedic.runtime.hook import Hook
from trainmedic.schemas import WorkerFailed
from trainmedic.schemas.telemetry import MAX_TAIL_CHARS, MAX_TAIL_LINES

RANK = LaunchedRank("llama-70b", 3, 5, 16, local_rank=1)


def load_shard(depth: int) -> None:
    if depth:
        load_shard(depth - 1)
    raise FileNotFoundError("shard 7 is missing")


def test_a_worker_error_carries_the_exceptions_last_traceback_lines_bounded() -> None:
    sink = ListSink()
    h = Hook(IDENTITY, sink, clock=lambda: 1000.0)
    with pytest.raises(FileNotFoundError), h.capture():
        load_shard(200)  # a traceback of some 400 lines
    h.close()
    (event,) = sink.events
    lines = event.traceback.splitlines()
    assert lines[-1] == "FileNotFoundError: shard 7 is missing"
    assert "in load_shard" in event.traceback
    assert len(lines) <= MAX_TAIL_LINES and len(event.traceback) <= MAX_TAIL_CHARS


def report(**fields) -> bytes:
    event = {"type": "worker_error", "ts": 5.0e9, "node": "n1", "job": "llama-70b", "rank": 5,
             "world_size": 16, "generation": 3, "error": "ValueError: bad", **fields}
    return json.dumps(event).encode()


def checked(line: bytes) -> WorkerFailed | Refused:
    return check(line, RankReports.fresh(RANK, ReportLimits(), now=1.0), node="n1", pid=7, now=2.0,
                 limits=ReportLimits())


def test_the_executor_keeps_a_ranks_traceback_to_its_last_lines() -> None:
    long = "".join(f"  File \"train.py\", line {n}\n" for n in range(500)) + "ValueError: bad\n"
    event = checked(report(traceback=long))
    assert isinstance(event, WorkerFailed)
    assert event.traceback.splitlines()[-1] == "ValueError: bad"
    assert len(event.traceback.splitlines()) <= MAX_TAIL_LINES and len(event.traceback) <= MAX_TAIL_CHARS


def test_a_report_whose_traceback_overflows_the_channel_is_refused() -> None:
    outcome = checked(report(traceback="x" * MAX_LINE))
    assert isinstance(outcome, Refused) and outcome.label == "oversized"


def test_a_bounded_error_and_traceback_fit_the_channel_even_escaped() -> None:
    worst = "\x01" * MAX_TAIL_CHARS  # each written as \u0001: six bytes
    event = checked(report(error=worst, traceback=worst))
    assert isinstance(event, WorkerFailed) and event.traceback == worst
