"""What jobs report never isolates a node (issue 45): two jobs failing on one node make it suspect (it
keeps its job, takes no new work) and send it a health check; only the node's own answer, or its
silence by the deadline, isolates it (within the cap); a passed check ends the suspicion. The log folds
back to the same state, in any interleaving of its partitions."""

from __future__ import annotations

import pytest

from tests.unit.coordinator.test_blame import ran_before_on_n1
from tests.unit.coordinator.test_fold import interleave
from tests.unit.coordinator.test_limits import lost, refold, unhealthy
from tests.unit.coordinator.world import LIMITED, Recorder, incident, of_type
from trainmedic.recovery.coordinator.core import catch_up, tick
from trainmedic.recovery.coordinator.core.fold import UnboundAck
from trainmedic.recovery.coordinator.core.lifecycle import new_work_refused, suspects
from trainmedic.schemas import CommandAcked
from trainmedic.schemas.commands import HEALTH_CHECK_JOB, NodeJoined, NodeLeaving
from trainmedic.schemas.nodes import NodeUncordoned


def checks(events: list) -> list:
    return [c for c in of_type(events, "command") if c.action == "health_check"]


def ticked(rec: Recorder, now: float) -> list:
    """A tick, the job's commands it sends done at once (the checks left alone)."""
    out = rec.tick(now=now)
    rec.ack([c for c in of_type(out, "command") if c.action != "health_check"], "done", now=now)
    return out


def about_health(events: list) -> list:
    return [i for i in of_type(events, "incident")
            if i.category in ("node_suspect", "health_check_failed", "health_check_refused")]


def suspect_n1() -> tuple[Recorder, list]:
    """Job `other` ran on n1 and failed there (a SEV2 at 90); then job llm fails on n1 (the detector's
    SEV1 at 100): two jobs the coordinator ran on n1 failed there. The restart's commands are done."""
    rec = Recorder(LIMITED)
    ran_before_on_n1(rec)
    rec.started()
    rec.tick(now=50.0)  # the capacity re-plan for job other's end: no change
    rec.feed(incident("other", "SEV2", node="n1", job="other", ts=90.0, category="cuda_error"), now=90.0)
    out = rec.feed(incident("g0", "SEV1", node="n1", job="llm", ranks=(0,), ts=100.0, category="cuda_error"),
                   now=100.0)
    rec.ack([c for c in of_type(out, "command") if c.action != "health_check"], "done", now=101.0)
    return rec, out


def replays_the_same(rec: Recorder, now: float) -> None:
    assert refold(rec) == rec.state
    assert all(refold(rec, interleave(rec.placed(), seed)) == rec.state for seed in range(10))
    assert catch_up(refold(rec), now) == []


def test_two_jobs_failing_on_a_node_make_it_suspect_and_send_it_a_health_check_not_isolate_it() -> None:
    rec, out = suspect_n1()
    [alert] = [i for i in of_type(out, "incident") if i.category == "node_suspect"]
    assert (alert.severity, alert.action, alert.node, alert.status) == ("WARN", "alert", "n1", "open")
    assert "llm" in alert.evidence[0] and "other" in alert.evidence[0]
    [check] = checks(out)
    assert (check.node, check.job, check.generation, check.incident_id, check.deadline) == (
        "n1", HEALTH_CHECK_JOB, 0, alert.id, 100.0 + LIMITED.health_check_deadline_s)
    [restart] = [p for p in of_type(out, "recovery_planned") if p.kind == "restart"]
    assert restart.nodes == ("n1", "n2", "n3")  # it keeps its job: the job's failure is the job's
    assert rec.tick(now=103.0) == [] and unhealthy(rec) == []  # nothing isolated after the group window
    assert new_work_refused(rec.state, "n1") is not None  # but it takes no new work
    assert rec.feed(incident("g0", "SEV1", node="n1", job="llm", ranks=(0,), ts=100.0,
                             category="cuda_error"), now=104.0) == []  # one check, however often delivered
    replays_the_same(rec, 104.0)


def test_a_failed_health_check_isolates_the_node() -> None:
    rec, out = suspect_n1()
    answer = rec.ack(checks(out), "failed", now=130.0, reason="GPU 3: 2 retired pages pending")
    [failed] = of_type(answer, "incident")
    assert (failed.category, failed.severity, failed.node, failed.job) == (
        "health_check_failed", "SEV1", "n1", None)
    assert "retired pages pending" in failed.evidence[0]
    assert unhealthy(rec) == []  # a node SEV1 waits for its group
    replan = rec.tick(now=133.0)
    [plan] = of_type(replan, "recovery_planned")
    assert unhealthy(rec) == ["n1"] and plan.isolated == {"n1": failed.id} and "n1" not in plan.nodes
    rec.ack(replan, "done", now=134.0)
    assert rec.state.suspected == set() and rec.tick(now=400.0) == []  # the check is over
    replays_the_same(rec, 400.0)


def test_a_passed_health_check_ends_the_suspicion_and_the_jobs_incidents_stay_the_jobs() -> None:
    rec, out = suspect_n1()
    answer = rec.ack(checks(out), "done", now=130.0, reason="no GPU seen: nothing to check")
    [resolved] = of_type(answer, "incident")
    assert (resolved.category, resolved.status) == ("node_suspect", "resolved")
    assert "passed" in resolved.evidence[-1] and "no GPU seen" in resolved.evidence[-1]
    assert rec.state.incidents["g0"].status == "open"  # the job's own incident: not the check's to end
    assert new_work_refused(rec.state, "n1") is None and "n1" not in suspects(rec.state)
    assert rec.tick(now=400.0) == [] and unhealthy(rec) == []
    replays_the_same(rec, 400.0)


def test_a_pass_vouches_only_for_what_came_before_it() -> None:
    rec, out = suspect_n1()
    rec.ack(checks(out), "done", now=130.0)
    out = rec.feed(incident("g1", "SEV1", node="n1", job="llm", ranks=(0,), ts=200.0, category="cuda_error"),
                   now=200.0)
    assert checks(out) == []  # job other failed before the pass: one job's failures since
    assert new_work_refused(rec.state, "n1") is None  # one job's failure is the job's: it holds no node
    rec.feed(incident("other-2", "SEV2", node="n1", job="other", ts=300.0, category="hang"), now=300.0)
    out = rec.feed(incident("g2", "SEV1", node="n1", job="llm", ranks=(0,), ts=310.0, category="cuda_error"),
                   now=310.0)
    [check] = checks(out)  # two jobs failed there since the pass: checked again
    assert check.id != checks(rec.log)[0].id and unhealthy(rec) == []


def test_no_answer_by_the_deadline_isolates_the_node_after_its_resends() -> None:
    rec, out = suspect_n1()
    [check] = checks(out)
    resent = [checks(rec.tick(now=t)) for t in (110.0, 120.0, 130.0, 135.0)]
    assert [[c.ts for c in r] for r in resent] == [[110.0], [120.0], [130.0], []]  # every ack_timeout_s
    assert all(r[0].id == check.id and r[0].deadline == check.deadline for r in resent[:3])
    sends = [checks(rec.tick(now=t)) for t in range(140, 220, 5)]
    assert [c.ts for r in sends for c in r] == list(range(140, 220, 10))  # until the deadline (220)
    assert of_type(rec.tick(now=check.deadline - 0.5), "incident") == []
    [failed] = of_type(rec.tick(now=check.deadline), "incident")
    assert failed.category == "health_check_failed" and "timed out" in failed.evidence[0]
    rec.tick(now=check.deadline + 3.0)
    assert unhealthy(rec) == ["n1"]
    replays_the_same(rec, check.deadline + 10.0)


def test_a_late_answer_after_the_deadline_changes_nothing() -> None:
    rec, out = suspect_n1()
    [check] = checks(out)
    rec.tick(now=check.deadline)
    rec.tick(now=check.deadline + 3.0)
    assert unhealthy(rec) == ["n1"]
    assert rec.ack([check], "done", now=check.deadline + 5.0) == [] and unhealthy(rec) == ["n1"]


def test_a_check_lost_between_suspicion_and_command_is_issued_on_catch_up() -> None:
    rec, out = suspect_n1()
    [check] = checks(out)
    state = refold(rec, [e for e in rec.log if e is not check])
    [again] = checks(catch_up(state, now=105.0))
    assert (again.id, again.deadline, again.ts) == (check.id, 105.0 + LIMITED.health_check_deadline_s, 105.0)


def test_the_isolation_cap_holds_a_failed_check_too() -> None:
    rec, out = suspect_n1()
    rec.feed(lost("lost-n4", "n4", ts=110.0), now=110.0)
    rec.tick(now=112.0)
    assert unhealthy(rec) == ["n4"]  # max(1, 10 % of 6) = 1 per 10 min: spent
    rec.ack(checks(out), "failed", now=130.0, reason="Xid 79 pending on GPU 0")
    held = rec.tick(now=133.0)
    assert unhealthy(rec) == ["n4"] and [i.category for i in of_type(held, "incident")] == ["mass_failure"]
    assert new_work_refused(rec.state, "n1") is not None  # held: in service for its job, no new work
    replays_the_same(rec, 140.0)


def test_an_answer_from_another_node_is_no_answer() -> None:
    rec, out = suspect_n1()
    [check] = checks(out)
    forged = CommandAcked(ts=130.0, node="n2", command_id=check.id, job=check.job, generation=0,
                          status="done")
    with pytest.raises(UnboundAck, match="went to n1"):
        rec.feed(forged, now=130.0)
    assert rec.state.commands[check.id].status == "issued" and rec.state.nodes["n1"].suspect_by is not None


def test_a_jobs_failure_alone_holds_no_node_and_forged_ones_of_invented_jobs_neither() -> None:
    """Before issue 45 any open SEV1 naming a node held it from new work: forged errors of invented jobs
    on idle n5 kept it out of the pool until their incidents resolved, which for jobs that never run
    is never."""
    rec = Recorder(LIMITED)
    rec.started()
    rec.feed(incident("f1", "SEV2", node="n5", job="invented-1", ts=90.0, category="cuda_error"), now=90.0)
    rec.feed(incident("f2", "SEV1", node="n5", job="invented-2", ts=91.0, category="cuda_error"), now=91.0)
    rec.feed(incident("g0", "SEV1", node="n1", job="llm", ranks=(0,), ts=92.0, category="cuda_error"),
             now=92.0)
    out = rec.tick(now=100.0)
    assert checks(out) == [] and unhealthy(rec) == []
    assert new_work_refused(rec.state, "n5") is None and new_work_refused(rec.state, "n1") is None
    rec.feed(lost("lost-n6", "n6", ts=101.0), now=101.0)  # node evidence waiting for its group holds its node
    assert new_work_refused(rec.state, "n6") == "node n6 has open SEV1 incident lost-n6"


# --- review fixes: an old check never fails a node that came back; refusals are no answer ---

def test_an_uncordon_after_the_suspicion_ends_it_and_its_old_check_never_fails_the_node() -> None:
    """n1 suspect, its check out; a lost node isolates it; repaired and uncordoned after the check's
    deadline, it was raised SEV1 `health_check_failed` ("timed out") by the old check at the next tick."""
    rec, out = suspect_n1()
    [check] = checks(out)
    rec.feed(lost("lost-n1", "n1", ts=105.0), now=105.0)
    ticked(rec, now=108.0)
    assert unhealthy(rec) == ["n1"]
    assert about_health(ticked(rec, now=check.deadline + 50)) == []  # an isolated node's check waits
    rec.feed(NodeUncordoned(ts=check.deadline + 100, node="n1", reason="repaired"), now=check.deadline + 100)
    assert rec.state.nodes["n1"].suspect_by is None  # the fold ends the check
    [resolved] = about_health(ticked(rec, now=check.deadline + 101))
    assert (resolved.category, resolved.status) == ("node_suspect", "resolved")
    assert "vouched for by an uncordon" in resolved.evidence[-1]
    assert about_health(ticked(rec, now=check.deadline + 200)) == [] and unhealthy(rec) == []
    assert new_work_refused(rec.state, "n1") is None and rec.state.suspected == set()
    replays_the_same(rec, check.deadline + 300)


def test_a_return_from_a_leave_vouches_but_an_executor_restart_without_one_is_checked_again() -> None:
    rec, out = suspect_n1()
    [check] = checks(out)
    rec.ack([check], "accepted", now=102.0)
    rec.feed(NodeJoined(ts=104.0, node="n1"), now=104.0)  # restarted: it has no answer, runs it when re-sent
    [resent] = checks(ticked(rec, now=112.0))
    assert resent.id == check.id and rec.state.nodes["n1"].suspect_by == check.incident_id
    rec.feed(NodeLeaving(ts=115.0, node="n1", reason="reboot"), now=115.0)
    assert about_health(ticked(rec, now=check.deadline + 10)) == []  # a leaving node's check waits
    rec.feed(NodeJoined(ts=check.deadline + 20, node="n1"), now=check.deadline + 20)
    [resolved] = about_health(ticked(rec, now=check.deadline + 21))
    assert resolved.status == "resolved" and "return from a leave" in resolved.evidence[-1]
    assert unhealthy(rec) == [] and new_work_refused(rec.state, "n1") is None
    replays_the_same(rec, check.deadline + 30)


def test_a_check_issued_late_gets_its_whole_time_from_its_first_send() -> None:
    """A coordinator down past the suspicion's deadline issues the lost check at catch_up: it failed it
    at the next tick, giving the node no time."""
    rec, out = suspect_n1()
    [check] = checks(out)
    state = refold(rec, [e for e in rec.log if e is not check])
    [late] = checks(catch_up(state, now=500.0))
    assert late.deadline == 500.0 + LIMITED.health_check_deadline_s
    assert of_type(tick(state, 501.0), "incident") == []
    assert checks(tick(state, 511.0)) and of_type(tick(state, late.deadline), "incident") != []


def test_a_check_accepted_then_silent_is_re_sent_until_its_deadline() -> None:
    rec, out = suspect_n1()
    [check] = checks(out)
    rec.ack([check], "accepted", now=101.0)
    sends = [c.ts for t in range(105, 225, 5) for c in checks(ticked(rec, now=float(t)))]
    assert sends == list(range(110, 220, 10))  # a restarted executor runs it again
    [failed] = [i for i in of_type(rec.log, "incident") if i.category == "health_check_failed"]
    assert "accepted it but did not answer" in failed.evidence[0]


def test_a_refusal_is_no_answer_the_check_is_re_sent_and_a_later_pass_counts() -> None:
    rec, out = suspect_n1()
    [check] = checks(out)
    assert rec.ack([check], "refused", now=102.0, reason="stale: issued 90.0s old") == []
    assert rec.state.commands[check.id].status == "issued" and unhealthy(rec) == []
    [resent] = checks(ticked(rec, now=110.0))
    [resolved] = of_type(rec.ack([resent], "done", now=112.0, reason="8 GPUs fine"), "incident")
    assert (resolved.category, resolved.status) == ("node_suspect", "resolved")
    assert ticked(rec, now=400.0) == [] and unhealthy(rec) == []
    replays_the_same(rec, 400.0)


def test_a_check_only_refused_until_its_deadline_raises_a_warning_not_an_isolation() -> None:
    """A clock skew, an epoch fence or a key that does not verify says nothing about the hardware: a
    `refused` failed the check and isolated the node, up to the cap."""
    rec, out = suspect_n1()
    [check] = checks(out)
    for t in range(100, 220, 10):
        rec.ack(checks(ticked(rec, now=t + 1.0)) or [check], "refused", now=t + 2.0,
                reason="unverified: signed by key k-old, which this node does not trust")
    [warned] = of_type(ticked(rec, now=check.deadline), "incident")
    assert (warned.category, warned.severity, warned.action, warned.node) == (
        "health_check_refused", "WARN", "alert", "n1")
    assert "unverified: signed by key k-old" in warned.evidence[0]
    assert of_type(ticked(rec, now=check.deadline + 10), "incident") == [] and unhealthy(rec) == []
    assert checks(ticked(rec, now=check.deadline + 40)) == []  # the check is over
    assert new_work_refused(rec.state, "n1") is not None  # held for a person: no new work
    replays_the_same(rec, check.deadline + 50)
