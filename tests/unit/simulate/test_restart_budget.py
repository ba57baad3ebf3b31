"""The coordinator's restart budget in the simulation: a job's incidents say how far it got, so
independent faults hours apart never exhaust the budget; a job given up on is restarted by a person."""

from __future__ import annotations

import pytest

from tests.unit.simulate.worlds import HOUR, cluster, gpu_lost, healed, process_exits
from trainmedic.recovery.coordinator.core.state import JobState
from trainmedic.simulate.faults import Fault
from trainmedic.simulate.healer import EPOCH

DAY = 86_400.0


def killed(ts: float, node: str = "n2") -> Fault:
    return Fault(ts=ts, node=node, category="process_exit", cause="killed")


def test_a_jobs_incidents_say_how_far_its_failed_generation_got():
    # a 2 s step from 0: killed at 1000.5 s, the job has completed 500 steps, the first at 2 s; restarted
    # (about 7.5 s), killed again 1 s after it resumed, before its first step; a lost GPU is the node's
    faults = [killed(1000.5), killed(1009.0), gpu_lost(3000.0, "n3")]
    world, healer = healed(cluster(5), faults, 4000.0)
    resumed = world.books["job"].resumed[0]
    assert faults[1].ts - resumed < 2.0  # the second kill lands before the new generation's first step
    first, second, lost = sorted((i for i in healer.state.incidents.values() if i.id.startswith("sim-")),
                                 key=lambda i: i.first_ts)
    assert (first.progress.steps, first.progress.since) == (500, EPOCH + 2.0)
    assert (second.progress.steps, second.progress.since) == (0, None)
    assert lost.category == "gpu_lost" and lost.progress is None  # a node's fault: every restart counts


@pytest.mark.parametrize("seed", [3, 4, 11, 23])
def test_process_faults_every_three_hours_never_exhaust_the_restart_budget(seed):
    # 150 days of kills at random, three hours apart on average: a rolling hour of 4 restarts gave up on
    # each of these seeds; restarts before a generation that ran 10 minutes no longer count
    days = 150
    world, healer = healed(cluster(5, person_restarts=False), process_exits(seed, days), days * DAY)
    assert not healer.gave_up
    assert world.books["job"].is_running and world.books["job"].lost_s["person"] == 0.0


def given_up(**trainmedic: object):
    """Kills every 3 minutes from 1000 s: 4 restarts within the hour, each after under 10 minutes of
    running, and the coordinator gives up at the 5th; then hours of no fault."""
    faults = [killed(1000.0 + 180.0 * i) for i in range(12)]
    world, healer = healed(cluster(5, **trainmedic), faults, 1000.0 + 5 * HOUR)
    world.books["job"].advance(world.now)
    return world, healer


def test_a_person_restarts_a_job_given_up_on_after_operator_s_and_the_wait_is_counted_as_person():
    world, healer = given_up(operator_s=1800.0)
    assert healer.gave_up == {"job"}
    alert = next(i for i in healer.state.incidents.values() if i.category == "recovery_failed")
    old, again = healer.state.jobs["job"], healer.state.jobs["job-1"]  # ended, then submitted anew
    assert old.state is JobState.FAILED and not old.nodes
    assert again.state is JobState.RUNNING and again.nodes == ("n0", "n1", "n2", "n3")
    book = world.books["job"]
    assert book.is_running and book.resumed[-1] > alert.ts - EPOCH + 1800.0
    assert book.lost_s["person"] == pytest.approx(1800.0)  # from the give-up until the person's submit


def test_without_the_person_a_job_given_up_on_stays_down():
    world, healer = given_up(operator_s=1800.0, person_restarts=False)
    assert healer.gave_up == {"job"} and set(healer.state.jobs) == {"job"}
    assert not world.books["job"].is_running and world.books["job"].lost_s["person"] > 4 * HOUR
