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
