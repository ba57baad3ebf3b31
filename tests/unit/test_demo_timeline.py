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
    from schemas import WorkerStepped

    timeline = Timeline("job")
    common = {"ts": 1.0, "node": "node-2", "job": "job", "world_size": 6, "step_time": 0.1}
    warned = WorkerStepped(rank=2, generation=2, step=40, restore_warning="no replica snapshot", **common)
    timeline.apply(warned, wall=1.0)
    timeline.apply(WorkerStepped(rank=3, generation=2, step=40, **common), wall=1.0)
    assert timeline.restore_warnings == {2: ["rank 2 on node-2: no replica snapshot"]}
    assert timeline.generations[2].first_step == 40
