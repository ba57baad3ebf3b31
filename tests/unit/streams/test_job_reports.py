"""What a job reports concerns only that job (issue 32, point 2): the three forgeries found with
the `rank` credentials, as event sequences. Worker reports never open, hold off or resolve a node's
incident, one report cannot move a job generations ahead, and jobs never seen started are bounded."""

from __future__ import annotations

from tests.unit.streams.events import (
    NODES,
    error,
    exited,
    gpu,
    hb,
    healthy,
    opened,
    run,
    start,
    step,
    steps,
)
from trainmedic.streams.core import Detector
from trainmedic.streams.core.job_rules import UNSTARTED_JOBS

CUDA = "RuntimeError: CUDA error: an illegal memory access was encountered"


def running(until: float = 20.0) -> list:
    """Job j (8 ranks on n0-n3) started at 1 and stepping once a second; every node healthy."""
    return [start(1.0, r) for r in range(8)] + steps(2.0, until) + healthy(0.0, until)


def resolved(incidents) -> list:
    return [i for i in incidents if i.status == "resolved"]


def test_two_forged_errors_of_invented_jobs_never_escalate_an_idle_node() -> None:
    """(i): two worker_errors naming jobs nobody started, on idle node n9, were SEV2 then SEV1 (the
    "SEV2 twice on a node" escalation): a node isolated for good. They are SEV2s of their jobs now,
    and count against no node."""
    forged = [error(10.0, 0, CUDA, job="invented-1", node="n9"),
              error(30.0, 0, CUDA, job="invented-2", node="n9")]
    out, det = run(healthy(0.0, 40.0, nodes=[*NODES, "n9"]) + forged)
    assert [(i.category, i.severity.value, i.job) for i in opened(out)] == [
        ("cuda_error", "SEV2", "invented-1"), ("cuda_error", "SEV2", "invented-2")]
    assert det.state.sev2_history.get("n9", []) == []


def test_a_started_jobs_failure_on_a_node_still_counts_against_it() -> None:
    """The escalation stays for jobs seen started: two jobs failing on one node make its SEV1."""
    events = healthy(0.0, 40.0, nodes=["n9"]) + [
        start(5.0, 0, job="a", node="n9"), error(10.0, 0, CUDA, job="a", node="n9"),
        start(25.0, 0, job="b", node="n9"), error(30.0, 0, "ValueError: bad", job="b", node="n9")]
    out, _ = run(events)
    assert [i.severity.value for i in opened(out)] == ["SEV2", "SEV1"]


def test_jobs_never_seen_started_are_bounded() -> None:
    """Reports of ever new invented jobs stop making state at UNSTARTED_JOBS; a started job still
    gets in past the cap. (Spread over 64 nodes: one node follows at most limits.node_jobs jobs,
    test_storms.py.)"""
    forged = [step(1.0 + n * 0.001, 0, 0, job=f"invented-{n}", node=f"x{n % 64}")
              for n in range(UNSTARTED_JOBS + 50)]
    _, det = run(forged + [start(5.0, 0, job="real")])
    assert len(det.state.jobs) == UNSTARTED_JOBS + 1 and "real" in det.state.jobs


def test_a_step_of_a_generation_far_ahead_does_not_blind_the_detector() -> None:
    """(ii): one worker_step (or worker_start) of generation 10**15 moved the job there and fenced
    off every real report after it: a crash of generation 0 then opened nothing. It is refused now,
    and the crash is the job's incident."""
    for forged in (step(10.5, 3, 999, gen=10**15), start(10.5, 3, gen=10**15)):
        events = running() + [forged, exited(12.0, 2, code=1)]
        out, det = run(events)
        assert [(i.category, i.job) for i in opened(out)] == [("process_exit", "j")]
        assert det.state.jobs["j"].gen == 0


def test_a_real_restart_still_moves_the_job_and_a_step_alone_does_not() -> None:
    """A generation moves on a worker_start within the bound; a step of an unannounced generation
    leaves the job where it is."""
    _, det = run(running() + [step(10.5, 0, 0, gen=1)])
    assert det.state.jobs["j"].gen == 0
    _, det = run(running() + [start(10.5, r, gen=3) for r in range(8)] + steps(11.0, 15.0, gen=3))
    assert det.state.jobs["j"].gen == 3 and det.state.jobs["j"].max_step >= 3


def xid79(ts: float = 10.0, node: str = "n1") -> list:
    """GPU 0 of `node` reports Xid 79 (whether it samples again is up to the test)."""
    return [gpu(ts, node, 0, xids=(79,), ecc_dbe=0, nvlink_errors=0)]


def test_a_forged_worker_start_on_the_node_does_not_resolve_its_gpu_lost() -> None:
    """(iii): a worker_start naming an invented job on n1 resolved n1's open gpu_lost ("a job was
    placed on the node"), and the coordinator then re-admitted a broken node."""
    events = (running(30.0) + xid79() + [start(20.0, 0, job="invented", node="n1")]
              + healthy(30.0, 120.0, silent={("n1", 0)}))
    out, det = run(events)
    assert [i.category for i in opened(out)] == ["gpu_lost"] and resolved(out) == []
    assert det.state.nodes["n1"].hw_id is not None


def test_the_jobs_new_generation_releases_it_but_leaves_the_gpu_lost_open() -> None:
    """The job restarts without n1 and steps: it is no longer held by the fault, which stays open
    while GPU 0 of n1 stays silent; a later crash of the new generation is the job's own incident."""
    moved = [start(20.0, r, gen=1, node=n) for r, n in zip(range(6), ["n0", "n0", "n2", "n2", "n3", "n3"],
                                                              strict=True)]
    moved += [step(21.0 + s, r, s, gen=1, node=m.node) for s in range(5) for r, m in enumerate(moved)]
    events = (running(10.0) + xid79() + healthy(10.0, 120.0, silent={("n1", 0)}) + moved
              + [exited(30.0, 0, code=1, gen=1, node="n0")])
    out, _ = run(events)
    assert [i.category for i in opened(out)] == ["gpu_lost", "process_exit"] and resolved(out) == []


def test_a_gpu_fault_resolves_on_the_nodes_own_clean_samples() -> None:
    """An Xid 79 reported once by a GPU that keeps sampling clean (a reset that worked): resolved
    once every GPU of n1 has reported clean for gpu.healthy_s (60 s), not before."""
    det = Detector()
    out, _ = run(running(10.0) + xid79() + healthy(10.0, 69.0), det, drain=False)
    assert resolved(out) == []
    out, _ = run(healthy(69.0, 75.0), det)
    assert [(i.category, i.node) for i in resolved(out)] == [("gpu_lost", "n1")]


def test_forged_reports_neither_hold_off_nor_end_a_node_lost() -> None:
    """A node whose agent went silent is lost at its timeout though reports naming it go on, and a
    worker_start naming it does not end its node_lost; its own heartbeat does."""
    forged = [step(10.0 + t, 2, 100 + t, node="n1") for t in range(10)] + [start(30.0, 2, node="n1")]
    det = Detector()
    out, _ = run(running(10.0) + healthy(10.0, 40.0, dead={"n1"}) + forged, det, drain=False)
    [lost] = opened(out)
    assert (lost.category, lost.node, lost.ts) == ("node_lost", "n1", 12.02) and resolved(out) == []
    out, _ = run([hb(40.5, "n1")], det)
    assert [i.category for i in resolved(out)] == ["node_lost"]
