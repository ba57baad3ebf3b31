"""Services count what they do: the detector pipeline (in memory) and the coordinator core's outputs."""

from __future__ import annotations

import json

from prometheus_client import REGISTRY

from tests.unit.coordinator.world import LIMITED, Recorder, incident
from tests.unit.streams.test_pipeline import TOPICS, message, pipeline
from tests.unit.streams.test_scenarios import SCENARIOS
from trainmedic.recovery.coordinator import observe
from trainmedic.schemas import RecoveryCompleted


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_the_detector_counts_events_dead_letters_incidents_and_detection_delay() -> None:
    lines = [line for line in (SCENARIOS / "gpu_lost_xid79.jsonl").read_bytes().splitlines() if line]

    def counts() -> tuple[float, ...]:
        return (value("trainmedic_detector_events_total"),
                value("trainmedic_dead_letters_total", service="detector"),
                value("trainmedic_incidents_total", category="gpu_lost", severity="SEV1", status="open"),
                value("trainmedic_detection_delay_seconds_count", severity="SEV1"))

    before = counts()
    run = pipeline()
    ordered = sorted(lines, key=lambda line: json.loads(line)["ts"])
    first, last = json.loads(ordered[0])["ts"], json.loads(ordered[-1])["ts"]
    for offset, line in enumerate([b"{not json", *ordered]):
        wall = json.loads(line)["ts"] if offset else first  # the detector's clock keeps up with event time
        run.on_message(message(TOPICS.gpu, 0, offset, b"k", line), wall=wall)
    run.on_tick(wall=last)  # events are counted on ticks
    after = counts()
    assert [b - a for a, b in zip(before, after, strict=True)] == [len(lines), 1, 1, 1]


def test_the_coordinator_counts_plans_commands_outcomes_and_the_time_to_its_commands_acked() -> None:
    rec = Recorder()
    before = (value("trainmedic_recovery_plans_total", kind="reattempt"),
              value("trainmedic_recovery_acked_seconds_count", kind="reattempt"),
              value("trainmedic_recovery_acked_seconds_sum", kind="reattempt"))
    rec.started(now=1.0)
    out = rec.feed(incident("net-1", "SEV3", node="n1", ts=20.0), now=20.0)  # first_ts 19
    observe.published(rec.state, out)
    done = rec.ack(out, "done", now=21.0)
    observe.published(rec.state, done)
    after = (value("trainmedic_recovery_plans_total", kind="reattempt"),
             value("trainmedic_recovery_acked_seconds_count", kind="reattempt"),
             value("trainmedic_recovery_acked_seconds_sum", kind="reattempt"))
    assert [b - a for a, b in zip(before, after, strict=True)] == [1, 1, 2.0]  # acked 2 s after first_ts
    observe.cluster(rec.state, 21.0)
    assert value("trainmedic_nodes", state="healthy") == 6 and value("trainmedic_jobs", state="running") == 1


def test_the_isolations_left_gauge_reaches_zero_at_the_cap_and_recovers_after_the_window() -> None:
    rec = Recorder(LIMITED)  # six nodes at the default cap: one isolation per window
    rec.started(now=1.0)
    observe.cluster(rec.state, 1.0)
    assert value("trainmedic_isolations_left") == 1
    rec.feed(incident("lost-1", "SEV1", node="n1", ts=20.0), now=20.0)
    rec.tick(now=25.0)  # past the SEV1 grouping window: decided, n1 isolated
    observe.cluster(rec.state, 25.0)
    assert value("trainmedic_isolations_left") == 0  # TrainmedicIsolationCapReached fires on this
    observe.cluster(rec.state, 26.0 + rec.state.config.isolation_window_s)
    assert value("trainmedic_isolations_left") == 1


def test_a_plan_that_leaves_its_job_without_nodes_is_not_counted_as_recovered() -> None:
    rec = Recorder()
    rec.started(now=1.0)
    rec.feed(incident("lost-1", "SEV1", node="n1", ts=20.0), now=20.0)
    job = rec.state.jobs["llm"]
    placed = job.plan
    completed = [RecoveryCompleted(ts=25.0, plan_id=placed.plan_id, job="llm", generation=placed.generation)]
    before = value("trainmedic_recovery_acked_seconds_count", kind=str(placed.kind))
    job.plan = placed.model_copy(update={"nodes": (), "previous": job.nodes})  # every node taken
    observe.published(rec.state, completed)
    assert value("trainmedic_recovery_acked_seconds_count", kind=str(placed.kind)) == before
    job.plan = placed  # the same plan placing the job: counted
    observe.published(rec.state, completed)
    assert value("trainmedic_recovery_acked_seconds_count", kind=str(placed.kind)) == before + 1


def test_labelled_series_exist_at_zero_before_their_first_event() -> None:
    """Panels show 0 rather than no data, and alert rules see a first event as an increase."""
    import trainmedic.recovery.executor.metrics  # noqa: F401 - defining the metrics creates the children
    import trainmedic.streams.metrics  # noqa: F401

    for name, labels in (("trainmedic_detection_delay_seconds_count", {"severity": "WARN"}),
                         ("trainmedic_recovery_acked_seconds_count", {"kind": "reconfigure"}),
                         ("trainmedic_recovery_outcomes_total", {"outcome": "failed"}),
                         ("trainmedic_command_acks_total", {"status": "refused"}),
                         ("trainmedic_executor_acks_total", {"status": "refused"}),
                         ("trainmedic_rank_exits_total", {"outcome": "unknown"})):
        assert REGISTRY.get_sample_value(name, labels) is not None, (name, labels)


def test_the_coordinator_times_the_phases_of_a_restart_it_sees() -> None:
    phases = ("detect", "plan", "commands")

    def sums() -> list[float]:
        return [value("trainmedic_recovery_phase_seconds_sum", phase=p) for p in phases]

    rec = Recorder()
    rec.started(now=1.0)
    before = sums()
    out = rec.feed(incident("exit-1", "SEV2", node="n1", ts=20.0), now=20.5)  # first_ts 19
    observe.published(rec.state, out)
    observe.published(rec.state, rec.ack(out, "done", now=23.0))
    assert [round(b - a, 3) for a, b in zip(before, sums(), strict=True)] == [1.0, 0.5, 2.5]


def test_an_executor_times_each_ranks_rendezvous_restore_and_first_step() -> None:
    from trainmedic.recovery.executor.core.phases import RankTimes, rank_phases
    from trainmedic.schemas import Restored, WorkerStarted, WorkerStepped

    common = dict(node="n1", job="llm", rank=0, world_size=2, generation=1)
    times = RankTimes(launched=10.0)
    early = WorkerStepped(ts=1.0, step=3, step_time=0.1, **common)
    assert rank_phases(times, early, 10.5) == []  # not joined yet
    assert rank_phases(times, WorkerStarted(ts=1.0, **common), 12.0) == [("rendezvous", 2.0)]
    assert rank_phases(times, WorkerStarted(ts=1.0, **common), 12.5) == []  # once
    restored = Restored(kind="replica", step=41, seconds=0.3)
    first = WorkerStepped(ts=2.0, step=41, step_time=0.5, restored=restored, **common)
    assert rank_phases(times, first, 13.0) == [("restore", 0.3), ("first_step", 1.0)]
    assert rank_phases(times, first, 14.0) == []
