"""What a rank may report through its executor: only about itself, at the executor's time, bounded.

The core (`reports.check`) with plain values; the socket with real processes: test_report_socket.py.
"""

from __future__ import annotations

import pytest

from tests.unit.executor.report_lines import RANK, line
from trainmedic.recovery.executor.core.reports import RankReports, Refused, ReportLimits, check
from trainmedic.recovery.executor.report_peers import rank_of
from trainmedic.schemas import WorkerFailed, WorkerStarted, WorkerStepped

LIMITS = ReportLimits(rate_per_s=10.0, burst=5, max_step_leap=1_000)


def fresh() -> RankReports:
    return RankReports.fresh(RANK, LIMITS, now=100.0)


def test_a_report_about_itself_goes_on_with_the_executors_time_pid_and_the_jobs_own_floor() -> None:
    event = check(line(), fresh(), node="n1", pid=4242, now=100.5, limits=LIMITS)
    assert isinstance(event, WorkerStepped)
    assert (event.ts, event.pid, event.step, event.model_dump()["local_rank"]) == (100.5, 4242, 10, 1)
    start = check(line(type="worker_start", hang_floor_s=0.001), fresh(), node="n1", pid=1, now=1.0,
                  limits=LIMITS)
    assert isinstance(start, WorkerStarted) and start.hang_floor_s == 120.0  # not the 1 ms it claimed


@pytest.mark.parametrize(("change", "label"), [
    ({"job": "someone-elses"}, "other_job"),
    ({"node": "n2"}, "other_node"),
    ({"generation": 10**15}, "other_generation"),  # the report that blinded the detector to a job
    ({"generation": 2}, "other_generation"),
    ({"rank": 0}, "other_rank"),
    ({"world_size": 8}, "other_world_size"),
    ({"type": "worker_exit", "exit_code": 1}, "malformed"),  # only the executor reports exits
    ({"type": "gpu_sample", "gpu": 0}, "malformed"),
    ({"step": -1}, "malformed"),
])
def test_a_report_about_anything_but_the_rank_that_speaks_is_refused(change: dict, label: str) -> None:
    outcome = check(line(**change), fresh(), node="n1", pid=1, now=100.0, limits=LIMITS)
    assert isinstance(outcome, Refused) and outcome.label == label, outcome


@pytest.mark.parametrize("raw", [b"", b"not json", b"[" * 50_000 + b"]" * 50_000, b"\xff\xfe" * 10,
                                 b'{"type": "worker_error", "error": "' + b"x" * 70_000 + b'"}'])
def test_garbage_deep_nesting_binary_and_oversized_lines_are_refused(raw: bytes) -> None:
    outcome = check(raw, fresh(), node="n1", pid=1, now=100.0, limits=LIMITS)
    assert isinstance(outcome, Refused) and outcome.label in {"malformed", "oversized"}


def test_steps_never_run_backwards_nor_leap_far_ahead_but_the_first_may_resume_anywhere() -> None:
    reports = fresh()
    assert isinstance(check(line(step=50_000), reports, node="n1", pid=1, now=100.0, limits=LIMITS),
                      WorkerStepped)  # resumed from a checkpoint
    back = check(line(step=49_999), reports, node="n1", pid=1, now=100.1, limits=LIMITS)
    leap = check(line(step=50_000 + 1_001), reports, node="n1", pid=1, now=100.2, limits=LIMITS)
    assert (back.label, leap.label) == ("step_backwards", "step_leap")
    assert isinstance(check(line(step=51_000), reports, node="n1", pid=1, now=100.3, limits=LIMITS),
                      WorkerStepped)


def test_a_rank_reports_at_a_bounded_rate() -> None:
    reports = fresh()
    outcomes = [check(line(step=i), reports, node="n1", pid=1, now=100.0, limits=LIMITS) for i in range(8)]
    assert [isinstance(o, Refused) and o.label == "rate" for o in outcomes] == [False] * 5 + [True] * 3
    assert isinstance(check(line(step=9), reports, node="n1", pid=1, now=100.2, limits=LIMITS), WorkerStepped)


def test_a_process_is_known_by_itself_or_its_nearest_launched_ancestor() -> None:
    parents = {30: 20, 20: 10, 10: 1}
    known = {10: RANK}
    assert rank_of(30, known.get, parents.get) == (10, RANK)
    assert rank_of(10, known.get, parents.get) == (10, RANK)
    assert rank_of(40, known.get, parents.get) is None


def test_only_the_contracts_fields_go_on_never_extras_a_rank_adds() -> None:
    event = check(line(junk="x" * 1000, stopped=True, local_rank=7), fresh(), node="n1", pid=1, now=100.0,
                  limits=LIMITS)
    dumped = event.model_dump()
    assert "junk" not in dumped and "stopped" not in dumped and dumped["local_rank"] == 1  # the launch's


def test_a_rank_reports_a_bounded_number_of_bytes() -> None:
    limits = ReportLimits(bytes_per_s=1000.0, byte_burst=2000)
    reports = RankReports.fresh(RANK, limits, now=100.0)
    big = line(type="worker_error", error="e" * 700)
    outcomes = [check(big, reports, node="n1", pid=1, now=100.0, limits=limits) for _ in range(3)]
    assert [isinstance(o, Refused) for o in outcomes] == [False, False, True]


def test_a_ranks_free_text_is_bounded_as_the_hook_bounds_it() -> None:
    event = check(line(type="worker_error", error="e" * 20_000), fresh(), node="n1", pid=1, now=100.0,
                  limits=LIMITS)
    assert isinstance(event, WorkerFailed) and len(event.error) == 4_096
