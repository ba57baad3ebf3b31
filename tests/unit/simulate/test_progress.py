"""A job's books: progress, checkpoints, rollbacks, and losses that add up to the time not trained."""

from __future__ import annotations

import pytest

from trainmedic.simulate.progress import LOSSES, Down, JobProgress, Restore, default_table
from trainmedic.simulate.scenario import JobModel

MODEL = JobModel(id="j", nodes=4, min_nodes=2, flops_per_gpu=1.0, step_s=10.0,
                 checkpoint={"interval_s": 100.0, "cost_s": 10.0})


def books() -> JobProgress:
    return JobProgress.running(MODEL, default_table(MODEL, 1), 1, 0.0)


def test_the_books_balance_goodput_plus_losses_is_the_nominal_time():
    job = books()
    job.stop(250.0)
    job.wait(300.0, Down.RESTART)
    job.resume(320.0, 2, Restore.CHECKPOINT)
    job.stop(500.0)
    job.resume(540.0, 4, Restore.REPLICA)
    job.advance(1000.0)
    good, lost = job.gpu_hours()
    assert good + sum(lost.values()) == pytest.approx(4 * 1000.0 / 3600)
    assert set(lost) == set(LOSSES)
    assert lost["detection"] == pytest.approx(4 * (50 + 40) / 3600)
    assert lost["restart"] == pytest.approx(4 * 20 / 3600)
    assert lost["shrunk"] > 0  # 180 s at half size


def test_a_checkpoint_restore_loses_the_work_since_the_last_checkpoint():
    job = books()
    job.stop(150.0)  # checkpoint done at 110 (100 s of work); 40 s more of work after it
    assert job.work == pytest.approx(4 * 140.0)
    job.resume(160.0, 4, Restore.CHECKPOINT)
    assert job.work == pytest.approx(4 * 100.0)
    assert job.lost_s["recomputation"] == pytest.approx(40.0)


def test_a_replica_restore_loses_only_the_step_in_progress():
    job = books()
    job.stop(155.0)  # 145 s of training: 14 steps and 5 s into the 15th
    job.resume(160.0, 4, Restore.REPLICA)
    assert job.lost_s["recomputation"] == pytest.approx(5.0)


def test_a_fault_while_down_changes_nothing_and_time_never_goes_back():
    job = books()
    assert job.stop(10.0)
    assert not job.stop(20.0)
    assert job.faults == 1
    with pytest.raises(ValueError, match="time went back"):
        job.advance(5.0)
    with pytest.raises(ValueError, match="cannot run at 5 nodes"):
        job.resume(30.0, 5, Restore.REPLICA)


def test_the_default_table_spans_min_to_max_in_at_most_sixteen_sizes():
    big = JobModel(id="big", nodes=2048, min_nodes=1920)
    table = default_table(big, 8)
    assert min(table) == 1920 and max(table) == 2048 and len(table) == 16
    assert table[2048] == pytest.approx(2048 * 8 * big.flops_per_gpu)
    assert default_table(JobModel(id="fixed", nodes=4), 8) == {4: 4 * 8 * 4.0e14}


def test_a_generation_counts_its_steps_from_its_first_and_a_reattempt_goes_on_counting():
    job = books()  # a 10 s step; a 10 s checkpoint after every 100 s of running
    job.stop(255.0)  # trained 0-100, 110-210, 220-255: 10 + 10 + 3 steps
    assert (job.steps, job.first_step) == (23, 10.0)
    job.resume(300.0, 4, Restore.REPLICA)
    assert (job.steps, job.first_step) == (0, None)
    job.stop(315.0)  # one step, at 310
    job.resume(320.0, 4, Restore.REPLICA, new_generation=False)  # a reattempt: the same processes
    job.advance(340.0)
    assert (job.steps, job.first_step) == (3, 310.0)
