"""A job's incident says how far its failed generation got (`Incident.progress`): the coordinator's
restart budget reads it. Steps count in the generation only, and survive a checkpoint. A generation
whose ranks die before their hook reports (a script broken at import) fails visibly too."""

from __future__ import annotations

from tests.unit.streams.events import WORLD, exited, opened, run, start, steps
from trainmedic.schemas.incident import Progress
from trainmedic.streams.checkpoints.contents import decode_checkpoint, encode_checkpoint
from trainmedic.streams.core import Detector
from trainmedic.streams.live import LiveDetector


def starts(ts: float, gen: int = 0) -> list:
    return [start(ts + 0.001 * r, r, gen=gen) for r in range(WORLD)]


def test_a_crash_after_steps_says_how_many_and_since_when() -> None:
    out, _ = run([*starts(1.0), *steps(10.0, 40.0), exited(40.5, 3)])
    [incident] = opened(out)
    assert incident.job == "j" and incident.progress == Progress(steps=30, since=10.0)


def test_a_crash_before_any_step_says_none() -> None:
    out, _ = run([*starts(1.0), exited(5.0, 3)])
    [incident] = opened(out)
    assert incident.progress == Progress(steps=0, since=None)


def test_a_new_generation_counts_its_own_steps_only() -> None:
    out, _ = run([*starts(1.0), *steps(10.0, 40.0), exited(40.5, 3),
                  *starts(60.0, gen=1), *steps(70.0, 75.0, first=30, gen=1), exited(75.5, 5, gen=1)])
    assert [i.progress for i in opened(out)] == [Progress(steps=30, since=10.0),
                                                 Progress(steps=5, since=70.0)]


def test_a_restarted_generation_that_dies_before_its_hook_starts_is_seen() -> None:
    """No worker_start at all: the executor's worker_exit of generation 1 announces it."""
    out, _ = run([exited(5.0, 0), exited(5.01, 2), exited(9.0, 0, gen=1), exited(9.01, 2, gen=1)])
    assert [(i.category, i.progress) for i in opened(out)] == [
        ("process_exit", Progress(steps=0, since=None)), ("process_exit", Progress(steps=0, since=None))]
    assert "9.000 rank 0 on n0: exited with code 1" in opened(out)[1].evidence


def test_progress_survives_a_checkpoint() -> None:
    det = Detector()
    for event in [*starts(1.0), *steps(10.0, 20.0)]:
        det.observe(event)
    saved = decode_checkpoint(encode_checkpoint(LiveDetector(det), {}, 21.0))
    assert saved.state.jobs["j"].first_step_ts == 10.0 and saved.state.to_dict() == det.state.to_dict()
    again = Detector(state=saved.state)
    [incident] = opened(run([exited(21.0, 3)], again)[0])
    assert incident.progress == Progress(steps=10, since=10.0)
