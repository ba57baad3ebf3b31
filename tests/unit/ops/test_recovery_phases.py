"""Every recovery timed by phase from the log alone (issue 34): first evidence → decided → on Kafka →
plan → remaining ranks stopped → ranks started → rendezvous → state restored → first step."""

from __future__ import annotations

from tests.unit.ops.test_incident_numbers import T0, done, opened, plan, view_of
from trainmedic.ops.incidents.phases import Phase, describe
from trainmedic.ops.incidents.render import details
from trainmedic.schemas import Restored, WorkerExited, WorkerStarted, WorkerStepped


def worker(kind, ts: float, rank: int, generation: int, **fields):
    return kind(ts=ts, node=f"n{rank // 2}", job="llm", rank=rank, world_size=4, generation=generation,
                **fields)


def recovery() -> list:
    """Rank 3 killed at T0; its peers stopped for the restart, every rank back, restored, stepping."""
    return [
        opened(), plan(ts=T0 + 1.2), done(ts=T0 + 2.0),
        worker(WorkerExited, T0 + 0.1, 2, 0, exit_code=1),  # fallout of the kill: no stop of the plan's
        *(worker(WorkerExited, T0 + 1.4 + r / 10, r, 0, signal=15, stopped=True) for r in (0, 1)),
        worker(WorkerExited, T0 + 0.9, 1, 0, signal=15, stopped=True),  # before the plan: not its stop
        *(worker(WorkerStarted, T0 + 3.0 + r / 10, r, 1) for r in range(4)),
        *(worker(WorkerStepped, T0 + 4.0 + r / 100, r, 1, step=41, step_time=0.5,
                 restored=Restored(kind="replica", step=41, seconds=0.4)) for r in range(4)),
    ]


def test_each_phase_ends_at_its_milestone_and_they_add_up_to_the_time_to_resume() -> None:
    view = view_of(*recovery(), published={"open": T0 + 1.05})
    [(job, found)] = view.phases
    assert job == "llm"
    assert [(p.name, round(p.seconds, 3)) for p in found] == [
        ("detect", 1.0), ("publish", 0.05), ("plan", 0.15), ("stop", 0.3), ("start", 0.5),
        ("rendezvous", 1.3), ("restore", 0.23), ("first step", 0.47)]
    assert round(sum(p.seconds for p in found), 3) == round(view.time_to_resume_s, 3) == 4.0
    text = details(view)
    assert "recovery of llm by phase (event time):" in text
    assert "  rendezvous    1.300 s  → every rank joined the process group" in text
    assert "  total         4.000 s  first evidence → first step" in text


def test_a_milestone_not_in_the_log_folds_into_the_next_phase() -> None:
    """Every rank died by itself (nothing to stop) and the incident's Kafka time is not known."""
    events = [e for e in recovery() if not (isinstance(e, WorkerExited) and e.stopped)]
    [(_, found)] = view_of(*events).phases
    named = [(p.name, round(p.seconds, 3)) for p in found]
    assert named[:3] == [("detect", 1.0), ("plan", 0.2), ("start", 0.8)]
    assert round(sum(p.seconds for p in found), 3) == 4.0


def test_no_phases_until_the_job_steps_again_and_none_for_a_reattempt() -> None:
    assert view_of(*recovery()[:-4]).phases == ()
    steps = [worker(WorkerStepped, T0 + 5.0, 0, 0, step=41, step_time=0.5)]
    assert view_of(opened(), plan(kind="reattempt", generation=0), done(generation=0), *steps).phases == ()


def test_one_line_for_a_terminal() -> None:
    found = (Phase("detect", "decided", T0 + 1.0, 1.0), Phase("first step", "stepped", T0 + 3.5, 2.5))
    assert describe(found) == "detect 1.00 s | first step 2.50 s | total 3.50 s"


def test_trainmedic_run_prints_the_phases_once_when_the_job_steps_again() -> None:
    from trainmedic.run.narrate import RunNarrator

    narrator = RunNarrator("llm", started=T0 - 60.0)
    said = []
    for event in recovery():
        published = T0 + 1.05 if isinstance(event, type(opened())) else None
        said += narrator.event(event, now=event.ts + 0.1, published=published)
    said += narrator.event(worker(WorkerStepped, T0 + 4.5, 0, 1, step=42, step_time=0.5), now=T0 + 4.6)
    assert [line for line in said if line.startswith("recovered")] == [  # at rank 0's first step
        "recovered from process_exit by phase: detect 1.00 s | publish 0.05 s | plan 0.15 s | stop 0.30 s | "
        "start 0.50 s | rendezvous 1.30 s | restore 0.20 s | first step 0.50 s | total 4.00 s"]
