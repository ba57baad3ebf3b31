"""Jobs: correlation into one incident, hangs, stragglers, exits, generations."""

from __future__ import annotations

import pytest

from tests.unit.streams.events import (
    error,
    exited,
    healthy,
    node_of,
    opened,
    run,
    start,
    step,
    steps,
)
from trainmedic.streams.core import CorrelationConfig, Detector, DetectorConfig, HangConfig

NCCL = "torch.distributed.DistBackendError: NCCL error: remote process exited"
CUDA = "RuntimeError: CUDA error: an illegal memory access was encountered"


def job_running(until: float, hosts_until: float | None = None):
    """A job stepping once a second until `until`; hosts report until `hosts_until`."""
    hosts_until = until + 60 if hosts_until is None else hosts_until
    return healthy(0, hosts_until) + [start(0.5, r) for r in range(8)] + steps(1, until)


def test_a_crashed_rank_is_one_incident_with_its_peers_symptoms_as_evidence():
    events = job_running(30) + [exited(30.2, 5, code=None, signal=9)]
    events += [error(30.5 + 0.01 * r, r, NCCL) for r in range(8) if r != 5]
    events += [exited(31.0 + 0.01 * r, r) for r in range(8) if r != 5]
    out = run(events)[0]
    (incident,) = opened(out)
    # A SIGKILL, every rank heard from at 30.57 (its peers' errors are what the kill did to them):
    # decided then, not at the end of the evidence hold (31.2).
    assert (incident.category, incident.node, incident.ranks, incident.ts) == (
        "process_exit", node_of(5), (5,), 30.57)
    assert len(incident.evidence) == 1 + 7  # the root and the peers' errors
    assert [i.id for i in out] == [incident.id] * len(out)  # the exits that follow join it


def test_symptoms_arriving_before_the_root_cause_do_not_win():
    events = job_running(30) + [error(30.1 + 0.01 * r, r, NCCL) for r in range(8) if r != 3]
    events += [error(30.6, 3, CUDA)]
    (incident,) = opened(run(events)[0])
    assert (incident.category, incident.ranks, incident.first_ts) == ("cuda_error", (3,), 30.1)
    assert incident.ts == 31.6  # the evidence hold of the CUDA error, within 1 s of it


def test_symptoms_alone_are_a_collective_error_naming_no_node():
    events = job_running(30) + [error(38.0 + 0.01 * r, r, NCCL) for r in range(8)]
    (incident,) = opened(run(events)[0])
    assert (incident.category, incident.node, incident.ranks, incident.ts) == (
        "nccl_error", None, tuple(range(8)), 40.0)


def test_the_hold_is_configurable():
    det = Detector(DetectorConfig(correlation=CorrelationConfig(evidence_hold_s=0.25,
                                                                symptom_hold_s=0.5)))
    events = job_running(30) + [error(30.0, 3, CUDA)]
    (incident,) = opened(run(events, det)[0])
    assert incident.ts == 30.25


def test_peer_errors_wait_for_an_overdue_node_and_become_its_evidence():
    events = healthy(0, 30.05) + healthy(30.05, 60, nodes=["n0", "n2", "n3"])
    events += [start(0.5, r) for r in range(8)] + steps(1, 30)
    events += [error(30.2 + 0.01 * r, r, NCCL) for r in (0, 1, 4, 5, 6, 7)]
    (incident,) = opened(run(events)[0])
    assert (incident.category, incident.node, incident.ranks) == ("node_lost", "n1", (2, 3))
    last_sample = 30.02
    assert incident.first_ts == 30.2 and incident.ts == pytest.approx(last_sample + 3.0)


def test_errors_after_the_decision_are_evidence_not_new_incidents():
    events = job_running(30) + [error(30.0, 3, CUDA)]
    events += [error(35.0 + r, r, NCCL) for r in range(8) if r != 3]
    events += [exited(45.0, r, signal=15) for r in range(8)]
    out, det = run(events)
    assert [i.category for i in out] == ["cuda_error"]
    (rec,) = det.state.incidents.values()
    assert len(rec.evidence) == 1 + 7 + 8


def test_clean_exits_at_the_end_of_a_job_are_not_incidents_and_stop_the_hang_rule():
    events = job_running(30) + [exited(30.5 + r, r, code=0) for r in range(8)]
    out, det = run(events)
    assert out == [] and "j" not in det.state.jobs
    assert det.state.nodes["n0"].jobs == {}


UNKNOWN = "adopted after an executor restart: not a child of this executor, exit status unknown"


def test_an_exit_of_unknown_status_blames_nobody_and_leaves_the_hang_rule_armed():
    # a rank adopted by a restarted executor ends; its peers stop stepping: a hang, not a clean end
    events = job_running(30) + [exited(30.2, 5, code=None, reason=UNKNOWN)]
    assert [i.category for i in opened(run(events, drain=False)[0])] == ["hang"]
    # every rank ends so: the job is gone, no incident
    events = job_running(30) + [exited(30.5 + r, r, code=None, reason=UNKNOWN) for r in range(8)]
    out, det = run(events)
    assert out == [] and "j" not in det.state.jobs


def test_ranks_their_executor_stopped_for_a_plan_are_not_a_fault_nor_a_hang():
    """A grow or a drain stops every rank (SIGTERM) before the next generation starts; no
    incident names that, and the quiet until the new generation is not a hang."""
    stopped = [exited(30.5 + 0.01 * r, r, code=None, signal=15, stopped=True) for r in range(8)]
    later = [start(60.0, r, gen=1) for r in range(8)] + steps(61, 80, gen=1)
    out, det = run(job_running(30, hosts_until=90) + stopped + later)
    assert out == [] and det.state.jobs["j"].gen == 1
    signalled = [exited(30.5 + 0.01 * r, r, code=None, signal=15) for r in range(8)]
    assert [i.category for i in opened(run(job_running(30) + signalled)[0])] == ["process_exit"]


def test_hang_fires_at_the_floor_when_steps_are_fast_naming_the_rank_that_stopped_first():
    events = job_running(30)
    events = [e for e in events if not (getattr(e, "rank", None) == 6 and e.ts > 29)]
    (incident,) = opened(run(events, drain=False)[0])
    last_progress = 29.0  # the first report of the job's highest step
    assert (incident.category, incident.ranks, incident.node) == ("hang", (6,), "n3")
    assert incident.first_ts == last_progress and incident.ts == last_progress + 20.0


def job_with_floor(floor_s, until: float, silent_until: float):
    """A job stepping once a second until `until`, then silent until `silent_until` (hosts report),
    whose worker_start carries `floor_s` (None: no floor of its own)."""
    starts = [start(0.5, r, hang_floor_s=floor_s) for r in range(8)]
    return healthy(0, silent_until) + starts + steps(1, until)


def test_a_job_with_a_higher_hang_floor_is_not_hung_where_the_default_floor_would_call_it():
    assert [i.category for i in opened(run(job_with_floor(None, 30, 60), drain=False)[0])] == ["hang"]
    assert run(job_with_floor(45.0, 30, 60), drain=False)[0] == []  # 30 s of silence, under its 45 s
    (incident,) = opened(run(job_with_floor(45.0, 30, 90), drain=False)[0])
    assert incident.ts - incident.first_ts == 45.0 and "the job's floor 45s" in incident.evidence[0]


def test_a_job_with_a_lower_hang_floor_is_hung_where_the_default_floor_waits():
    assert run(job_with_floor(None, 30, 45), drain=False)[0] == []  # 15 s of silence, under the 20 s
    (incident,) = opened(run(job_with_floor(5.0, 30, 45), drain=False)[0])
    assert incident.category == "hang" and incident.ts - incident.first_ts == 5.0


def test_a_jobs_hang_floor_also_lengthens_its_warm_up_and_outlives_a_restart():
    cfg = DetectorConfig(hang=HangConfig(warmup_s=120.0))
    events = healthy(0, 400) + [start(0.5, r, hang_floor_s=300.0) for r in range(8)] + steps(200, 210)
    events += [start(211.0, r, gen=1) for r in range(8)]  # a worker_start without it keeps the floor
    events += steps(212, 240, gen=1)
    det = Detector(cfg)
    assert run(events, det, drain=False)[0] == []
    assert det.state.jobs["j"].hang_floor_s == 300.0
    without = [e.model_copy(update={"hang_floor_s": None}) if e.type == "worker_start" else e for e in events]
    assert [(i.category, i.ts) for i in opened(run(without, Detector(cfg), drain=False)[0])] == [
        ("hang", 120.5), ("hang", 259.0)]  # in its warm-up, and 20 s after its restarted ranks stopped


def test_hang_threshold_is_three_times_the_median_step():
    events = healthy(0, 200) + [start(0.5, r) for r in range(8)] + steps(1, 100, took=10.0)
    (incident,) = opened(run(events, drain=False)[0])
    assert incident.ts - incident.first_ts == 30.0


def test_an_occasional_slow_step_that_completes_is_not_a_hang():
    slow = [s for s in steps(1, 20)] + [step(38.0 + 0.001 * r, r, 19, 18.0) for r in range(8)]
    slow += steps(39, 80, first=20)
    events = healthy(0, 80) + [start(0.5, r) for r in range(8)] + slow
    assert run(events)[0] == []


def test_a_long_first_step_is_warm_up_not_a_hang():
    events = healthy(0, 300) + [start(0.5, r) for r in range(8)]
    events += steps(240, 290)  # compile took four minutes
    assert run(events)[0] == []
    cfg = DetectorConfig(hang=HangConfig(warmup_s=120.0))
    out = opened(run(events, Detector(cfg))[0])
    assert [(i.category, i.ts) for i in out] == [("hang", 120.5)]


def test_no_hang_while_the_host_is_lost():
    events = healthy(0, 30) + healthy(30, 120, nodes=["n0", "n2", "n3"])
    events += [start(0.5, r) for r in range(8)] + steps(1, 30)
    assert [i.category for i in opened(run(events)[0])] == ["node_lost"]


def test_hang_resolves_when_the_job_steps_again():
    events = job_running(30, hosts_until=75) + steps(60, 70, first=30)
    out, _ = run(events)
    assert [(i.status, i.category) for i in out] == [("open", "hang"), ("resolved", "hang")]


def test_a_new_generation_resolves_the_failure_and_fences_off_old_processes():
    events = job_running(30, hosts_until=62) + [error(30.0, 3, CUDA)]
    events += [start(40.0, r, gen=1) for r in range(8)]
    events += [error(40.5, 2, NCCL, gen=0)]  # a late report from the old generation
    events += steps(41, 60, gen=1)
    out, _ = run(events)
    assert [(i.status, i.category) for i in out] == [("open", "cuda_error"),
                                                     ("resolved", "cuda_error")]
    assert out[1].ts == 41.0


def test_membership_follows_ranks_to_new_nodes():
    events = job_running(10) + [start(20.0, r, gen=1, node="n9") for r in range(8)]
    _, det = run(events)
    assert det.state.nodes["n9"].jobs == {"j": list(range(8))}
    assert all("j" not in det.state.nodes[n].jobs for n in ("n0", "n1", "n2", "n3"))


def test_a_straggler_is_warned_once_and_resolved_when_it_catches_up():
    events = healthy(0, 200) + [start(0.5, r) for r in range(8)]
    events += steps(1, 100, factor={4: 2.0}) + steps(100, 190, first=99)
    out, _ = run(events)
    assert [(i.status, i.category, i.ranks, i.node) for i in out] == [
        ("open", "straggler", (4,), "n2"), ("resolved", "straggler", (4,), "n2")]


def test_a_slightly_slower_rank_is_not_a_straggler():
    events = healthy(0, 200) + [start(0.5, r) for r in range(8)]
    events += steps(1, 190, factor={4: 1.3})
    assert run(events)[0] == []
