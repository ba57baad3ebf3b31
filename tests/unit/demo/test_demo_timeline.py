from trainmedic.demo.timeline import Timeline


def test_steps_lost_counts_completed_steps_the_next_generation_runs_again():
    timeline = Timeline("job")
    for step in range(5):
        timeline.stepped(0, 4, step, 100.0 + step)
    timeline.stepped(1, 4, 3, 110.0)
    timeline.stepped(1, 4, 4, 110.5)
    assert timeline.generation == 1 and timeline.generations[1].first_step_ts == 110.0
    assert timeline.steps_lost(0, 1) == 2
    timeline.stepped(2, 4, 5, 120.0)
    assert timeline.steps_lost(1, 2) == 0


def test_a_step_that_reports_a_restore_fallback_is_kept_for_its_generation():
    from trainmedic.schemas import WorkerStepped

    timeline = Timeline("job")
    common = {"ts": 1.0, "node": "node-2", "job": "job", "world_size": 6, "step_time": 0.1}
    warned = WorkerStepped(rank=2, generation=2, step=40, restore_warning="no replica snapshot", **common)
    timeline.apply(warned, wall=1.0)
    timeline.apply(WorkerStepped(rank=3, generation=2, step=40, **common), wall=1.0)
    assert timeline.restore_warnings == {2: ["rank 2 on node-2: no replica snapshot"]}
    assert timeline.generations[2].first_step == 40


def test_the_report_times_the_incident_on_kafka_from_the_injection():
    from trainmedic.demo.faults import _delay, published_after
    from trainmedic.schemas import Incident

    timeline = Timeline("job")
    injected = 1000.0
    opened = Incident(ts=1002.0, id="exit-1", status="open", category="process_exit", severity="SEV2",
                      action="restart", job="job", first_ts=1001.0)
    timeline.apply(opened, wall=1004.0, published=1003.6)
    timeline.apply(opened, wall=1004.1, published=1003.9)  # a second copy, published later
    resolved = opened.model_copy(update={"status": "resolved", "ts": 1020.0})
    timeline.apply(resolved, wall=1021.0, published=1020.5)
    seen = timeline.incidents["exit-1"]
    assert _delay(seen) == 1.0  # first evidence → decided
    assert published_after(seen, injected) == 3.6  # injected → on Kafka, the first copy
    assert published_after(None, injected) is None


def test_after_a_reattempt_the_job_resumed_at_its_first_step_after_the_ack():
    from trainmedic.schemas import RecoveryCompleted, RecoveryPlanned

    timeline = Timeline("job")
    for i in range(40):  # the ranks keep stepping through the flap
        timeline.stepped(3, 6, 50 + i, 100.0 + i * 0.25)
    plan = RecoveryPlanned(ts=103.0, plan_id="p", incident_id="flap-1", job="job", kind="reattempt",
                           generation=3, nodes=("n0",), previous=("n0",))
    timeline.apply(plan, wall=103.1)
    assert timeline.resumed_in_place("flap-1", 3) is None  # not acknowledged yet
    timeline.apply(RecoveryCompleted(ts=104.6, plan_id="p", job="job", generation=3), wall=106.0)
    assert timeline.resumed_in_place("flap-1", 3) == 104.75  # not the last step when the ack was read


def test_a_generation_s_restores_are_told_in_one_line_once_its_ranks_report_them():
    from trainmedic.schemas import Restored, WorkerStepped

    timeline = Timeline("job")
    common = {"ts": 1.0, "node": "node-2", "job": "job", "world_size": 2, "step_time": 0.1, "generation": 3}
    assert timeline.restore_of(3) is None
    for rank, read, received in ((0, 100, 0), (1, 40, 60)):
        restored = Restored(kind="replica", step=41, seconds=0.2 + rank, read=read, received=received)
        timeline.apply(WorkerStepped(rank=rank, step=41, restored=restored, **common), wall=1.0)
        timeline.apply(WorkerStepped(rank=rank, step=41, restored=restored, **common), wall=1.0)  # again
    timeline.apply(WorkerStepped(rank=0, step=42, **common), wall=1.1)
    assert timeline.restore_of(3) == ("job generation 3: 2 ranks restored step 41 from replica snapshots "
                                      "(140 elements read on their own nodes, 60 received from other nodes), "
                                      "slowest 1.20s")
