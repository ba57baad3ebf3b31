"""A job ends: it succeeds when every node says its ranks of the current generation exited 0, or an
operator stops it; either way `job_ended` is on the log, its nodes are free for a waiting job, and
nothing restarts it."""

from __future__ import annotations

from tests.unit.coordinator.world import LIMITED, Recorder, incident, of_type, submitted
from trainmedic.bus.message import parse_message
from trainmedic.recovery.coordinator.core import ClusterState, CoordinatorConfig, apply, catch_up
from trainmedic.recovery.coordinator.core.endings import rejected, resolutions, unanswered
from trainmedic.recovery.coordinator.core.state import JobState
from trainmedic.recovery.coordinator.intake import receive
from trainmedic.schemas import JobEnded, JobStopRequested, NodeLeaving, RanksFinished, Topics, encode

TOPICS = Topics("t.")


def finished(node: str, generation: int = 0, job: str = "llm", ts: float = 20.0) -> RanksFinished:
    return RanksFinished(ts=ts, node=node, job=job, generation=generation, ranks=())


def stop(job: str = "llm", ts: float = 30.0) -> JobStopRequested:
    return JobStopRequested(ts=ts, job=job, reason="done with it", by="alice")


def refold(rec: Recorder) -> ClusterState:
    state = ClusterState.initial(rec.state.config)
    for event in sorted(rec.log, key=lambda e: e.type not in ("job_submitted", "job_stop")):
        apply(state, event)
    return state


def test_a_job_succeeds_when_every_node_reported_and_not_before() -> None:
    rec = Recorder()
    rec.started()
    assert rec.feed(finished("n1"), now=20.0) == [] and rec.feed(finished("n2"), now=21.0) == []
    assert rec.state.jobs["llm"].state is JobState.RUNNING
    [ended] = rec.feed(finished("n3"), now=22.0)
    assert (ended.type, ended.job, ended.state, ended.generation) == ("job_ended", "llm", "succeeded", 0)
    job = rec.state.jobs["llm"]
    assert job.state is JobState.SUCCEEDED and job.nodes == () and rec.state.job_on("n1") is None
    assert rec.feed(finished("n3"), now=23.0) == []  # a redelivered report ends nothing twice
    assert rec.placed()[-2] == (("recovery", "llm"), ended)
    assert refold(rec) == rec.state


def test_reports_of_an_older_generation_do_not_end_the_job() -> None:
    rec = Recorder()
    rec.started()
    restart = rec.feed(incident("i1", "SEV2", node="n2"), now=10.0)
    rec.ack(restart, "done", now=11.0)
    assert rec.state.jobs["llm"].generation == 1
    for node in ("n1", "n2", "n3"):  # generation 0's ranks were stopped by the restart, some with 0
        assert rec.feed(finished(node, generation=0), now=20.0) == []
    assert rec.state.jobs["llm"].state is JobState.RUNNING
    out = [e for node in ("n1", "n2", "n3") for e in rec.feed(finished(node, generation=1), now=21.0)]
    assert [(e.type, e.generation) for e in out] == [("job_ended", 1)]


def test_a_report_of_the_current_generation_does_not_end_a_job_a_newer_plan_moves() -> None:
    rec = Recorder()
    rec.started()
    rec.feed(finished("n1"), now=20.0)
    rec.feed(finished("n2"), now=20.0)
    restart = rec.feed(incident("i1", "SEV2", node="n3"), now=21.0)  # to generation 1, in flight
    assert rec.feed(finished("n3"), now=22.0) == []
    assert rec.state.jobs["llm"].state is JobState.RECOVERING
    rec.ack(restart, "done", now=23.0)
    out = [e for node in ("n1", "n2", "n3") for e in rec.feed(finished(node, generation=1), now=30.0)]
    assert [(e.type, e.generation) for e in out] == [("job_ended", 1)]


def test_an_incident_of_a_finished_job_restarts_nothing() -> None:
    rec = Recorder()
    rec.started()
    for node in ("n1", "n2", "n3"):
        rec.feed(finished(node), now=20.0)
    [skipped] = rec.feed(incident("late", "SEV2", node="n2", ts=30.0), now=30.0)
    assert skipped.type == "recovery_skipped" and "ended (succeeded)" in skipped.reason
    assert of_type(rec.tick(now=31.0), "command") == []


def test_the_nodes_of_a_finished_job_go_to_a_job_that_waited_for_them() -> None:
    rec = Recorder()
    rec.started()
    [waits] = rec.feed(submitted("next", nodes=("n1", "n2"), ts=5.0), now=5.0)
    assert waits.type == "recovery_skipped" and "runs job llm" in waits.reason
    for node in ("n1", "n2", "n3"):
        rec.feed(finished(node), now=20.0)
    out = rec.tick(now=21.0)
    [plan] = of_type(out, "recovery_planned")
    assert (plan.job, plan.generation, plan.kind) == ("next", 0, "reconfigure")
    assert set(plan.nodes) <= {"n1", "n2", "n3", "n4", "n5", "n6"} and len(plan.nodes) >= 2
    assert {c.action for c in of_type(out, "command")} == {"start"}
    assert rec.state.jobs["next"].state is JobState.RECOVERING


def test_a_stop_sends_stop_commands_and_the_job_ends_stopped_when_they_are_done() -> None:
    rec = Recorder()
    rec.started()
    out = rec.feed(stop(), now=30.0)
    [plan] = of_type(out, "recovery_planned")
    assert (plan.kind, plan.nodes, plan.previous, plan.generation) == ("stop", (), ("n1", "n2", "n3"), 1)
    commands = of_type(out, "command")
    assert sorted((c.node, c.action) for c in commands) == [("n1", "stop"), ("n2", "stop"), ("n3", "stop")]
    assert rec.state.jobs["llm"].state is JobState.STOPPING
    assert rec.feed(stop(ts=31.0), now=31.0) == []  # asked twice: one stop
    rec.ack(commands[:2], "done", now=32.0)
    assert rec.state.jobs["llm"].state is JobState.STOPPING
    [ended] = rec.ack(commands[2:], "done", now=33.0)
    assert (ended.type, ended.state, ended.generation) == ("job_ended", "stopped", 1)
    assert "stopped by alice: done with it" in ended.reason
    assert rec.state.jobs["llm"].state is JobState.STOPPED
    assert rec.feed(incident("late", "SEV2", node="n2", ts=40.0), now=40.0)[0].type == "recovery_skipped"
    assert refold(rec) == rec.state


def test_a_stop_whose_command_fails_still_ends_the_job_and_escalates_the_node() -> None:
    rec = Recorder()
    rec.started()
    commands = of_type(rec.feed(stop(), now=30.0), "command")
    rec.ack(commands[:2], "done", now=31.0)
    out = rec.ack(commands[2:], "failed", now=32.0, reason="ranks survived SIGKILL")
    assert [e.type for e in out][:2] == ["job_ended", "incident"]
    assert "stop on n3: failed" in out[0].reason and out[1].category == "stop_failed"
    assert rec.state.jobs["llm"].state is JobState.STOPPED and not rec.state.healthy("n3")


def test_a_job_that_never_started_stops_at_once() -> None:
    rec = Recorder()
    rec.started()
    rec.feed(submitted("next", nodes=("n1", "n2"), ts=5.0), now=5.0)  # waits: llm holds n1, n2
    [ended] = rec.feed(stop("next"), now=30.0)
    assert (ended.type, ended.state, ended.generation, ended.job) == ("job_ended", "stopped", None, "next")
    assert rec.state.jobs["next"].state is JobState.STOPPED


def test_a_coordinator_restarted_after_a_stop_was_read_stops_the_job_and_does_not_start_it() -> None:
    rec = Recorder()
    state = refold(rec)
    apply(state, submitted())
    apply(state, stop())
    [ended] = catch_up(state, now=40.0)
    assert (ended.type, ended.state) == ("job_ended", "stopped")


def test_a_coordinator_restarted_after_the_last_report_ends_the_job() -> None:
    rec = Recorder()
    rec.started()
    state = refold(rec)
    for node in ("n1", "n2", "n3"):
        apply(state, finished(node))  # read while no coordinator led
    [ended] = of_type(catch_up(state, now=40.0), "job_ended")
    assert (ended.type, ended.state) == ("job_ended", "succeeded")


def test_a_jobs_own_max_restarts_is_used_instead_of_the_configs() -> None:
    def restarts(**spec) -> list[str]:
        rec = Recorder(LIMITED)  # max_restarts 4, backoff 30 s, 2 min, 10 min
        commands = rec.feed(submitted(**spec), now=1.0)
        rec.ack(commands, "done", now=2.0)
        out = []
        for i, now in enumerate((100.0, 200.0, 400.0)):
            answer = rec.feed(incident(f"i{i}", "SEV2", node="n2", ts=now, category="cuda_oom"), now=now)
            rec.ack(answer, "done", now=now + 1)
            out += [e.type for e in answer if e.type == "recovery_failed"
                    or (e.type == "recovery_planned" and e.kind != "stop")]  # a give-up stops its ranks
        return out

    assert restarts() == ["recovery_planned"] * 3
    assert restarts(restart={"max_restarts": 1, "backoff_s": (10,)}) == [
        "recovery_planned", "recovery_failed"]


def test_a_jobs_backoff_and_window_are_used_instead_of_the_configs() -> None:
    rec = Recorder(CoordinatorConfig(**{**LIMITED.model_dump(), "restart_backoff_s": (1000.0,)}))
    rec.ack(rec.feed(submitted(restart={"backoff_s": (5.0,), "window_s": 60.0}), now=1.0), "done", now=2.0)
    rec.ack(rec.feed(incident("i0", "SEV2", node="n2", ts=100.0), now=100.0), "done", now=101.0)
    assert rec.feed(incident("i1", "SEV2", node="n2", ts=102.0), now=102.0) == []  # backs off 5 s
    assert of_type(rec.tick(now=106.0), "recovery_planned")
    job = rec.state.jobs["llm"]
    assert len(job.restarts) == 2


def test_worker_specs_carry_the_jobs_args_env_workdir_and_failure_settings() -> None:
    rec = Recorder()
    out = rec.feed(submitted(args=("--lr", "3e-4"), env={"STEPS": "100"}, workdir="/home/u/proj",
                             failure={"hang_floor_s": 300.0}), now=1.0)
    worker = of_type(out, "command")[0].worker
    assert worker.command == ("python", "train.py", "--lr", "3e-4")
    assert (worker.env, worker.workdir, worker.failure.hang_floor_s) == (
        {"STEPS": "100"}, "/home/u/proj", 300.0)


def test_a_stop_of_a_job_never_submitted_is_refused_and_of_an_ended_job_ignored() -> None:
    rec = Recorder()
    rec.started()
    record = parse_message(TOPICS, TOPICS.jobs, 0, 9, b"ghost", encode(stop("ghost")), now=30.0)
    assert receive(rec.state, record, now=30.0) == (
        "coordinator rejected it: job stop for ghost: no such job was submitted")
    for node in ("n1", "n2", "n3"):
        rec.feed(finished(node), now=31.0)
    assert rec.feed(stop(), now=32.0) == [] and rec.state.jobs["llm"].stop is None
    assert rec.state.jobs["llm"].state is JobState.SUCCEEDED


def test_a_stop_read_after_the_job_succeeded_folds_the_same_live_and_on_a_rebuild() -> None:
    rec = Recorder()
    rec.started()
    for node in ("n1", "n2", "n3"):
        rec.feed(finished(node), now=22.0)
    assert rec.feed(stop(ts=40.0), now=40.0) == []  # live: the job had ended, the stop is ignored
    assert rec.state.jobs["llm"].stop is None
    assert refold(rec) == rec.state  # a rebuild reads the jobs topic (and the stop) first


def gave_up(rec: Recorder) -> list:
    """The job started, then failed where its policy allows no restart: the coordinator gives up."""
    rec.ack(rec.feed(submitted(restart={"max_restarts": 0}), now=1.0), "done", now=2.0)
    return rec.feed(incident("i2", "SEV2", node="n2", category="software_error"), now=50.0)


def test_a_job_the_coordinator_gives_up_on_ends_failed_its_ranks_stopped_and_stays_failed() -> None:
    """Issue 33: `job list` showed a given-up job `stopping` at its next generation forever (the
    nodes leaving at the end of `trainmedic run` re-planned it), its incidents open."""
    rec = Recorder()
    out = gave_up(rec)
    assert [e.type for e in out if e.type != "command"] == [
        "recovery_skipped", "recovery_failed", "incident", "recovery_planned", "job_ended"]
    [plan] = of_type(out, "recovery_planned")
    assert (plan.kind, plan.nodes, plan.previous, plan.generation) == ("stop", (), ("n1", "n2", "n3"), 1)
    assert sorted(c.node for c in of_type(out, "command") if c.action == "stop") == ["n1", "n2", "n3"]
    [ended] = of_type(out, "job_ended")
    assert (ended.state, ended.generation) == ("failed", 0) and "restart" in ended.reason
    job = rec.state.jobs["llm"]
    assert (job.state, job.nodes, job.end_reason) == (JobState.FAILED, (), ended.reason) and job.over
    for node in ("n1", "n2", "n3"):  # the run's nodes shut down: nothing re-plans the job
        rec.feed(NodeLeaving(ts=60.0, node=node, reason="trainmedic run ended"), now=60.0)
    assert [e for e in rec.tick(now=61.0) if getattr(e, "job", None) == "llm"] == []
    [late] = rec.feed(incident("i3", "SEV2", node="n1", ts=70.0), now=70.0)
    assert late.type == "recovery_skipped" and "ended (failed)" in late.reason
    assert rec.state.jobs["llm"].state is JobState.FAILED and refold(rec) == rec.state
    assert rec.feed(stop(ts=80.0), now=80.0) == [] and rec.state.jobs["llm"].stop is None


def test_a_jobs_end_resolves_its_open_incidents_with_the_reason_but_not_a_nodes_fault_or_an_alert() -> None:
    rec = Recorder()
    out = gave_up(rec)
    [alert] = [e for e in of_type(out, "incident") if e.action == "alert"]
    resolved = resolutions(rec.state, out, now=51.0)
    assert [(i.id, i.status, i.ts) for i in resolved] == [("i2", "resolved", 51.0)]
    assert resolved[0].evidence[-1].startswith("51.000 resolved: job llm ended failed: ")
    assert rec.state.incidents[alert.id].status == "open"  # for a person: not resolved by the end
    assert resolutions(rec.state, of_type(out, "recovery_skipped"), now=51.0) == []
    other = Recorder()
    other.started()
    apply(other.state, incident("gpu", "SEV1", node="n3", category="gpu_ecc"))  # the node's fault
    ended = JobEnded(ts=60.0, job="llm", state="stopped", generation=0, reason="stopped by alice")
    assert resolutions(other.state, [ended], now=60.0) == []  # its node's re-admission reads it


def test_a_rejected_submission_is_answered_with_job_ended_rejected_that_ends_nothing() -> None:
    rec = Recorder()
    rec.started()
    bad = submitted("ghostly", nodes=("n1", "n9"), ts=30.0)
    record = parse_message(TOPICS, TOPICS.jobs, 0, 9, b"ghostly", encode(bad), now=30.0)
    why = receive(rec.state, record, now=30.0)
    [answer] = rejected(rec.state, bad, why, now=31.0)
    assert (answer.job, answer.state, answer.generation, answer.reason) == ("ghostly", "rejected", None, why)
    assert "n9 not in the cluster" in why
    again = submitted(nodes=("n1", "n9"), ts=32.0)  # a bad second submission of a taken id: the first stands
    assert rejected(rec.state, again, "coordinator rejected it: ...", now=32.0) == []
    before = refold(rec)
    apply(rec.state, answer)
    apply(rec.state, JobEnded(ts=33.0, job="llm", state="rejected", reason="an old rejection of the id"))
    assert rec.state == before and rec.state.jobs["llm"].state is JobState.RUNNING
    refused = [(bad, why), (stop("ghost"), "coordinator rejected it: no such job")]
    assert unanswered(rec.state, [answer], refused, now=40.0) == []  # answered live already
    assert [e.job for e in unanswered(rec.state, [], refused, now=40.0)] == ["ghostly"]  # refused while down
