"""The sampling loop's schedule and stop."""

from __future__ import annotations

import threading

import pytest

from trainmedic.producers.loop import next_deadline, run_every


@pytest.mark.parametrize(("deadline", "now", "expected"), [
    (10.0, 10.2, (11.0, 0)),   # on time
    (10.0, 11.0, (12.0, 1)),   # exactly one round late
    (10.0, 13.5, (14.0, 3)),   # a stall: skip, never bunch
])
def test_the_next_deadline_stays_on_the_grid(
    deadline: float, now: float, expected: tuple[float, int],
) -> None:
    assert next_deadline(deadline, 1.0, now) == expected


def test_rounds_run_until_stop_is_set_with_the_wall_clock_time() -> None:
    stop = threading.Event()
    seen: list[float] = []

    def tick(now: float) -> None:
        seen.append(now)
        if len(seen) == 3:
            stop.set()

    run_every(0.001, tick, stop, wall=iter([1.0, 2.0, 3.0, 4.0]).__next__)
    assert seen == [1.0, 2.0, 3.0]


def test_between_runs_while_a_round_is_awaited_and_rounds_stay_on_their_grid() -> None:
    stop = threading.Event()
    clock = [0.0]
    rounds: list[float] = []
    between: list[float] = []

    def tick(now: float) -> None:
        rounds.append(now)
        if len(rounds) == 3:
            stop.set()

    def poll(now: float) -> None:
        between.append(now)
        clock[0] += 0.25  # each poll stands for a quarter of a round passing

    run_every(1.0, tick, stop, between=poll, between_s=0.0, monotonic=lambda: clock[0],
              wall=lambda: 100 + clock[0])
    assert rounds == [100.0, 101.0, 102.0]
    assert between == [100.0, 100.25, 100.5, 100.75, 101.0, 101.25, 101.5, 101.75]
