"""Rate limits on what job reports raise, and the `storm` (issue 45, point 2; streams/core/limits.py).

The red-team run: 2,200 telemetry.worker records for 200 invented jobs with `hang_floor_s` 1 gave 200
SEV1 hang incidents in 45 s, and the detector followed every one of those jobs. Each test here fails
on the code before the limits."""

from __future__ import annotations

import random

import pytest

from tests.unit.coordinator.world import Recorder
from tests.unit.streams.events import exited, gpu, healthy, opened, run, start, step
from trainmedic.streams.core import Detector, DetectorConfig, DetectorState, LimitsConfig
from trainmedic.streams.replay import replay

FORGER = "n9"  # the node whose executor credentials write the forgery
OTHER = "n8"


def forgery(jobs: int = 200, t0: float = 1.0, node: str = FORGER, first: int = 0) -> list:
    """11 records per invented job (a start with a 1 s hang floor, 10 quick steps), a job every 0.2 s:
    2,200 records in 40 s, each job hanging 1 s after its last step."""
    out = []
    for n in range(jobs):
        t, name = t0 + 0.2 * n, f"invented-{first + n:03d}"
        out.append(start(t, 0, job=name, node=node, hang_floor_s=1.0))
        out += [step(t + 0.01 * (k + 1), 0, k, took=0.01, job=name, node=node) for k in range(10)]
    return out


def alive(until: float = 60.0) -> list:
    """The agents of both nodes report (heartbeats, two GPUs each) until `until`."""
    return healthy(0.0, until, nodes=[FORGER, OTHER])


def categories(incidents) -> list[tuple[str, str | None, str | None]]:
    return [(i.category, i.node, i.job) for i in opened(incidents)]


def test_the_200_invented_jobs_forgery_gives_the_limit_and_one_storm() -> None:
    """At most limits.node_incidents (10) hangs and one storm for the node, not 200 hangs."""
    events = forgery()
    assert len(events) == 2_200 and events[-1].ts - events[0].ts < 45
    out, det = run(alive(45.0) + events)
    hangs = [i for i in opened(out) if i.category == "hang"]
    storms = [i for i in opened(out) if i.category == "storm"]
    assert len(hangs) == 10 and {i.node for i in hangs} == {FORGER}
    assert [(s.node, s.job, s.severity.value, s.action.value) for s in storms] == [
        (FORGER, None, "SEV2", "alert")]
    assert len(opened(out)) == 11
    assert det.limited.suppressed["node"] == 64 - 10  # the jobs it follows, less those that opened
    assert len(det.state.jobs) == 64 and det.limited.refused == (200 - 64) * 11  # every report of the rest


def test_a_node_follows_at_most_node_jobs_started_jobs() -> None:
    """Job state per node is bounded (limits.node_jobs, 64): the 65th job's start is not followed and
    raises the node's storm, nor is a job known only from its steps; a job on another node is still
    followed, and so is another rank of a job the node follows."""
    events = [start(1.0 + 0.01 * n, 0, job=f"invented-{n:03d}", node=FORGER) for n in range(200)]
    steps_only = [step(4.0, 0, 0, job="unstarted", node=FORGER)]
    out, det = run(events + steps_only + [start(5.0, 0, job="real", node=OTHER)], drain=False)
    assert len(det.state.nodes[FORGER].jobs) == 64 and len(det.state.jobs) == 65
    assert "real" in det.state.jobs and "invented-064" not in det.state.jobs
    assert categories(out) == [("storm", FORGER, None)]
    assert det.state.storms[f"node:{FORGER}"].refused == 137 and "unstarted" not in det.state.jobs
    _, det = run([*events, start(6.0, 1, job="invented-000", node=FORGER)], drain=False)
    assert det.state.jobs["invented-000"].ranks.keys() == {0, 1}


@pytest.mark.parametrize("where", [OTHER, FORGER])
def test_a_real_xid79_still_opens_during_the_storm(where: str) -> None:
    """Node evidence is never limited: a GPU fallen off the bus opens its gpu_lost on another node,
    and on the storming node itself (a forger must not hide a real hardware failure behind a storm)."""
    out, _ = run(alive(45.0) + forgery() + [gpu(30.0, where, 1, xids=(79,))])
    found = categories(out)
    assert ("storm", FORGER, None) in found
    assert found.index(("storm", FORGER, None)) < [c for c, _, _ in found].index("gpu_lost")
    [lost] = [i for i in opened(out) if i.category == "gpu_lost"]
    assert (lost.node, lost.severity.value, lost.action.value) == (where, "SEV1", "reconfigure")


def test_a_job_past_its_limit_storms_and_its_later_failures_are_suppressed() -> None:
    """limits.job_incidents (5) per job: a job failing at every generation (a forger's starts, 1 s
    apart) opens five process_exits, then one storm for the job; the rest are suppressed."""
    events = []
    for gen in range(12):
        events += [start(1.0 + gen, 0, job="j", gen=gen, node=OTHER), exited(1.5 + gen, 0, job="j", gen=gen,
                                                                             node=OTHER)]
    out, det = run(alive(20.0) + events)
    assert categories(out) == [("process_exit", OTHER, "j")] * 5 + [("storm", None, "j")]
    assert det.limited.suppressed["job"] == 7


def test_after_the_window_incidents_open_again_and_the_storm_resolves() -> None:
    """The storm lasts limits.window_s of event time from its opening: then it resolves, saying how
    many it suppressed; what it held that is still open is released through the limits again (two
    open, the third raises the next storm, which releases it when it ends), and the node's job-report
    incidents open again."""
    config = DetectorConfig(limits=LimitsConfig(node_incidents=2, window_s=10.0))
    late = [start(30.0, 0, job="late", node=FORGER, hang_floor_s=1.0)]
    late += [step(30.0 + 0.01 * (k + 1), 0, k, took=0.01, job="late", node=FORGER) for k in range(10)]
    out, _ = run(alive(40.0) + forgery(jobs=5) + late, Detector(config))
    window = [("hang", "open"), ("hang", "open"), ("storm", "open"), ("storm", "resolved")]
    assert [(i.category, i.status.value, i.job) for i in out if i.category in ("hang", "storm")] == [
        *[(c, s, j) for (c, s), j in zip(window, ("invented-000", "invented-001", None, None), strict=True)],
        *[(c, s, j) for (c, s), j in zip(window, ("invented-002", "invented-003", None, None), strict=True)],
        ("hang", "open", "invented-004"), ("hang", "open", "late")]
    first, second = [i for i in out if i.category == "storm" and i.status == "resolved"]
    assert "3 incidents suppressed" in first.evidence[-1] and "1 incidents suppressed" in second.evidence[-1]
    released = [i for i in opened(out) if any("released: the storm of node n9" in e for e in i.evidence)]
    assert [i.job for i in released] == ["invented-002", "invented-003", "invented-004"]


def test_a_storm_escalates_nothing_and_counts_against_no_node() -> None:
    """Storms of one node in the escalation window (two floods, each storm releasing what it held into
    the next) stay SEV2 `alert` and add nothing to the node's SEV2 history (a storm is no failure of the
    node); nor does a hang a storm held and released (it escalates nothing, as when it was held)."""
    config = DetectorConfig(limits=LimitsConfig(node_incidents=1, window_s=5.0))
    out, det = run(alive(40.0) + forgery(jobs=3) + forgery(jobs=3, t0=20.0, first=3), Detector(config))
    storms = [i for i in opened(out) if i.category == "storm"]
    assert [(s.severity.value, s.action.value) for s in storms] == [("SEV2", "alert")] * 4
    hangs = [i for i in opened(out) if i.category == "hang"]
    assert len(hangs) == 6  # every one, each storm's released when it ends
    assert det.state.sev2_history[FORGER] == [i.ts for i in hangs if "released" not in i.evidence[-1]]


def test_replay_of_the_forgery_gives_the_same_incidents_whatever_the_ticks() -> None:
    """Deterministic: the same telemetry gives the same incidents (ids, times, evidence), in replay and
    with random wall-clock ticks in between, and across a save and restore of the state midway."""
    events = sorted(alive(45.0) + forgery(jobs=100) + [gpu(30.0, FORGER, 1, xids=(79,))], key=lambda e: e.ts)
    first = replay(events)
    assert first == replay(events)
    assert any(i.category == "storm" for i in first)
    rng, ticked, det = random.Random(7), [], Detector()
    for event in events:
        if rng.random() < 0.05:
            ticked += det.advance(rng.uniform(det.state.clock, event.ts))
        ticked += det.observe(event)
    assert ticked + det.drain() == first
    half = len(events) // 2
    det = Detector()
    cut = [i for e in events[:half] for i in det.observe(e)]
    det = Detector(state=DetectorState.from_dict(det.state.to_dict()))
    assert cut + [i for e in events[half:] for i in det.observe(e)] + det.drain() == first


def test_the_limits_are_config_and_validated() -> None:
    assert LimitsConfig() == LimitsConfig(node_incidents=10, job_incidents=5, window_s=60.0, node_jobs=64)
    assert DetectorConfig.from_dict({"limits": {"node_jobs": 8}}).limits.node_jobs == 8
    for bad in ({"node_incidents": 0}, {"job_incidents": -1}, {"window_s": 0}, {"node_jobs": 1.5}):
        with pytest.raises(ValueError, match="LimitsConfig"):
            LimitsConfig(**bad)


def test_the_coordinator_neither_restarts_nor_isolates_for_a_storm() -> None:
    """The detector's storm is `alert`: the coordinator's fold never makes it pending, so no plan and
    no isolation, for a node's storm (here on n2, a node of its running job) or a job's."""
    node_storm = [i for i in opened(run(alive(45.0) + forgery(node="n2"))[0]) if i.category == "storm"]
    exits = [e for g in range(7) for e in (start(1.0 + g, 0, job="llm", gen=g, node="n1"),
                                           exited(1.5 + g, 0, job="llm", gen=g, node="n1"))]
    job_storm = [i for i in opened(run(exits)[0]) if i.category == "storm"]
    assert [(i.node, i.job) for i in node_storm + job_storm] == [("n2", None), (None, "llm")]
    rec = Recorder()
    rec.started()
    for n, storm in enumerate(node_storm + job_storm):
        assert rec.feed(storm.model_copy(update={"ts": 60.0 + n}), now=60.0 + n) == []
        assert rec.tick(61.0 + n) == []
    assert rec.state.nodes["n2"].healthy and not rec.state.pending


def test_the_metrics_count_what_the_limits_held_back() -> None:
    """trainmedic_detector_incidents_suppressed_total{scope} and ..._job_reports_refused_total, read
    from the live detector when scraped (a detector restored from a checkpoint replaces its own)."""
    from prometheus_client import REGISTRY

    from trainmedic.streams.live import LiveConfig, LiveDetector

    def value(name: str, **labels) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    before = (value("trainmedic_detector_incidents_suppressed_total", scope="node"),
              value("trainmedic_detector_job_reports_refused_total"))
    live = LiveDetector(Detector(), LiveConfig(lateness_s=0.0))
    for event in sorted(alive(45.0) + forgery(), key=lambda e: e.ts):
        live.feed(event, ("worker", 0), event.ts)
    live.tick(50.0)
    after = (value("trainmedic_detector_incidents_suppressed_total", scope="node"),
             value("trainmedic_detector_job_reports_refused_total"))
    assert (after[0] - before[0], after[1] - before[1]) == (54, 136 * 11)


def shared_job(until: float, gen: int = 0, t0: float = 0.5) -> list:
    """Job `llm`: rank 0 on the forger's node, rank 1 on the honest one, stepping once a second."""
    out = [start(t0, 0, job="llm", gen=gen, node=FORGER), start(t0, 1, job="llm", gen=gen, node=OTHER)]
    out += [step(t0 + 0.5 + k, r, k, job="llm", gen=gen, node=node) for k in range(int(until - t0))
            for r, node in ((0, FORGER), (1, OTHER))]
    return out


def test_a_real_failure_on_an_honest_node_of_a_job_shared_with_a_storming_node_is_emitted() -> None:
    """The forger floods from n9, where job llm has a rank too; the real SIGKILL of llm's rank on the
    honest n8 counts against n8 and llm only, not n9's storm: it opens at once, a restart for the
    coordinator. (Before, an incident counted against every node of its job: n9's storm held it, and
    nothing ever emitted it.)"""
    out, det = run(alive(200.0) + shared_job(28.0) + forgery(jobs=30)
                   + [exited(30.0, 1, code=-9, job="llm", node=OTHER)])
    assert ("storm", FORGER, None) in categories(out)
    [killed] = [i for i in out if i.job == "llm"]
    assert (killed.category, killed.status.value, killed.node, killed.action.value) == (
        "process_exit", "open", OTHER, "restart")
    assert killed.ts < 32.0 and not any(r.suppressed for r in det.state.incidents.values() if r.job == "llm")


def test_a_failure_its_jobs_storm_held_is_released_when_the_storm_ends() -> None:
    """limits.job_incidents 2: llm fails at generations 0 and 1 (rank 0 on n9); at generation 2 the real
    SIGKILL of rank 1 on n8 is past the job's limit and its storm holds it. While the job is still
    followed, the storm's end releases it (a job's failure is delayed by a storm, never lost)."""
    config = DetectorConfig(limits=LimitsConfig(job_incidents=2, window_s=20.0))
    events = []
    for gen in range(3):
        t0 = 0.5 + 5 * gen
        events += shared_job(t0 + 3, gen=gen, t0=t0)
        events += [exited(t0 + 4, 0, code=1, job="llm", gen=gen, node=FORGER)] if gen < 2 else [
            exited(t0 + 4, 1, code=-9, job="llm", gen=gen, node=OTHER)]
    out, det = run(alive(40.0) + events, Detector(config))
    assert [(c, n) for c, n, _ in categories(out)] == [
        ("process_exit", FORGER), ("process_exit", FORGER), ("storm", None), ("process_exit", OTHER)]
    storm_end = [i.ts for i in out if i.category == "storm" and i.status == "resolved"]
    killed = opened(out)[-1]
    assert [killed.ts] == storm_end and killed.action.value == "restart"
    assert killed.evidence[-1].endswith("released: the storm of job llm is over")
    assert det.limited.suppressed["job"] == 1
