"""Issue 33: what `job list`, `job status`, `job submit --allow-unknown-nodes` and `nodes list` say of
a job the coordinator rejected, of the nodes only such a job named, and of a job whose restart
waits out its backoff (the broker-backed runs are in tests/integration)."""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass, replace

from tests.unit.coordinator.world import LIMITED, Recorder, incident, submitted
from trainmedic.ops.jobs.cli import await_answer, check_log, job_lines
from trainmedic.ops.jobs.states import JobLog, state_text
from trainmedic.ops.jobs.status import StepHistory, job_status, render
from trainmedic.ops.nodes import rows, taken
from trainmedic.recovery.coordinator.core import CoordinatorConfig, apply
from trainmedic.recovery.coordinator.intake import log_state
from trainmedic.schemas import JobEnded, NodeJoined

WHY = "coordinator rejected it: job ghostly: node ghost not in the cluster"


def log_of(events: list, config: CoordinatorConfig | None = None) -> JobLog:
    """The log folded as `job list` folds it (what the fold refuses, skipped)."""
    state = log_state(config)
    for event in sorted(events, key=lambda e: e.type != "job_submitted"):
        with suppress(ValueError):
            apply(state, event)
    return JobLog.of(state, events)


REJECTED = [NodeJoined(ts=1.0, node="n1"), submitted("ghostly", nodes=("n1", "ghost"), ts=2.0),
            JobEnded(ts=3.0, job="ghostly", state="rejected", reason=WHY)]


def test_a_rejected_job_is_listed_rejected_with_why_with_or_without_the_coordinators_config() -> None:
    for config in (None, LIMITED):  # without it, the fold takes the job the coordinator refused
        log = log_of(REJECTED, config)
        assert job_lines(log, now=10.0)[1].split()[:4] == ["ghostly", "rejected", "-", "0"]
        assert job_lines(log, now=10.0)[1].endswith(f"n1 ghost  ({WHY})")
        job = log.displayed("ghostly")
        status = replace(job_status(job, StepHistory("ghostly")), state=state_text(log, job, 10.0))
        assert f"state       rejected: {WHY}" in render(status, now=10.0)


def test_a_rejected_id_is_free_again_and_a_later_job_of_it_shows_as_itself() -> None:
    check_log(None, submitted("ghostly", nodes=("n1", "n2")).job, log_of(REJECTED), allow_unknown_nodes=True)
    rec = Recorder()
    rec.feed(submitted("ghostly", nodes=("n1", "n2"), ts=4.0), now=4.0)  # the coordinator took this one
    assert job_lines(JobLog.of(rec.state, REJECTED), now=5.0)[1].split()[:2] == ["ghostly", "starting"]


def test_nodes_list_shows_no_node_that_never_existed_as_ready() -> None:
    events = [*REJECTED, submitted("waits", nodes=("n1", "later"), ts=5.0)]
    state = taken(log_of(events).state, events)
    never = "never heard from: no executor there reported and --config does not list it"
    assert rows(state, now=10.0) == [  # "ghost", named only by the rejected job, is not listed
        ("later", "unknown", "-", never, "waits"), ("n1", "ready", "-", "-", "-")]


@dataclass
class Record:
    event: object


class Watch:
    """A JobWatch whose polls return the records given, one list per poll, and advance the clock."""

    def __init__(self, polls: list[list], clock: list[float], state=None) -> None:
        self.polls, self.clock = polls, clock
        self.state = state or log_state(None)

    def poll(self, timeout_s: float) -> list:
        self.clock[0] += timeout_s
        return [Record(event) for event in (self.polls.pop(0) if self.polls else [])]


def test_submit_waits_for_the_coordinators_answer_and_reports_a_rejection() -> None:
    clock, said = [0.0], []
    watch = Watch([[], [], [REJECTED[2]]], clock)
    code, answer = await_answer(watch, "ghostly", 30.0, said.append, lambda: clock[0])
    assert (code, answer) == (1, f"job ghostly rejected by the coordinator: {WHY}")


def test_submit_reports_a_start_or_no_answer_within_its_wait() -> None:
    rec = Recorder()
    clock = [0.0]
    rec.feed(submitted(), now=1.0)
    assert await_answer(Watch([], clock, rec.state), "llm", 30.0, print, lambda: clock[0]) == (
        0, "job llm accepted by the coordinator: starting on n1 n2 n3")
    clock, said = [0.0], []
    code, answer = await_answer(Watch([], clock), "llm", 12.0, said.append, lambda: clock[0])
    assert code == 0 and answer.startswith("no answer from the coordinator within 12 s")
    assert said == ["waiting for the coordinator's answer (5 s of 12 s)",
                    "waiting for the coordinator's answer (10 s of 12 s)"]


def test_a_job_whose_restart_backs_off_shows_recovering_with_the_wait_and_the_next_attempt() -> None:
    rec = Recorder(LIMITED)  # backoff 30 s, 2 min, 10 min
    rec.started()
    restart = rec.feed(incident("i1", "SEV2", node="n2", ts=50.0), now=50.0)
    rec.ack(restart, "done", now=51.0)
    assert rec.feed(incident("i2", "SEV2", node="n2", ts=60.0), now=60.0) == []  # waits until 80
    log, job = JobLog(rec.state, {}), rec.state.jobs["llm"]
    assert job.state.value == "running"
    assert state_text(log, job, now=60.0) == "recovering (backoff 20 s, next attempt at 00:01:20 UTC)"
    assert job_lines(log, now=70.0)[1].split()[:4] == ["llm", "recovering", "(backoff", "10"]
    again = rec.tick(now=80.0)  # restarted: the plan is in flight
    assert state_text(log, job, now=80.0) == "recovering"
    rec.ack(again, "done", now=81.0)
    assert state_text(log, job, now=82.0) == "running"
