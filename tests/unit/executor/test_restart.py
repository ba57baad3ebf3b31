"""A restarted executor's view of its previous life: which ranks to adopt, kill or report, and
the answer to the command it was applying (pure: /proc facts and the ledger passed in)."""

from trainmedic.recovery.executor.core.ledger_state import AppliedCommand, LedgerState, RecordedAck
from trainmedic.recovery.executor.core.restart import (
    RecordedRank,
    interrupted_answer,
    sort_leftovers,
    unanswered,
)


def rank(pid: int, rank_no: int = 0, job: str = "j", generation: int = 1, start: int | None = 500):
    return RecordedRank(pid, start, job, generation, rank_no, 2)


def ledger(generation: int = 1, action: str | None = "start", job: str = "j") -> LedgerState:
    state = LedgerState()
    command = AppliedCommand(f"c-{action}-{generation}", job, generation, action)
    state.applied.add(command.id)
    state.generations[job] = generation
    state.last[job] = state.newest = command
    return state


def test_a_rank_still_running_the_current_generation_is_adopted():
    found = sort_leftovers([rank(10), rank(11, 1)], {10: 500, 11: 500}, ledger())
    assert [r.pid for r in found.adopt] == [10, 11]
    assert found.kill == () and found.ended == ()
    assert found.running == {("j", 1)}


def test_a_reused_pid_is_neither_adopted_nor_killed_but_reported_ended():
    found = sort_leftovers([rank(10), rank(11, 1)], {10: 777, 11: None}, ledger())
    assert found.adopt == () and found.kill == ()
    assert [r.pid for r in found.ended] == [10, 11]
    assert found.launched == {("j", 1): {0, 1}} and found.running == set()


def test_a_rank_with_no_recorded_start_time_is_never_adopted():
    found = sort_leftovers([rank(10, start=None)], {10: None}, ledger())
    assert [r.pid for r in found.ended] == [10]


def test_ranks_the_ledger_says_must_not_run_are_killed_with_why():
    recorded = [rank(10, generation=0), rank(11, job="other"), rank(12, job="gone")]
    state = ledger(generation=1)
    state.generations["other"] = 1
    state.last["other"] = AppliedCommand("stop-other", "other", 1, "stop")
    found = sort_leftovers(recorded, {10: 500, 11: 500, 12: 500}, state)
    assert found.adopt == ()
    whys = {r.pid: why for r, why in found.kill}
    assert "generation 0 was superseded by generation 1" in whys[10]
    assert "stop-other stops job other" in whys[11]
    assert "no command for job gone" in whys[12]


def test_a_ledger_without_actions_adopts_by_generation():
    found = sort_leftovers([rank(10)], {10: 500}, ledger(action=None))
    assert [r.pid for r in found.adopt] == [10]


def test_an_interrupted_launch_is_done_if_all_its_ranks_were_recorded_else_failed_never_reapplied():
    start = AppliedCommand("s", "j", 2, "start", (0, 1))
    assert interrupted_answer(start, {("j", 2): {0, 1}}).status == "done"
    failed = interrupted_answer(start, {("j", 1): {0, 1}})
    assert failed.status == "failed" and "generation 2 was launched; not applied again" in failed.reason
    partly = interrupted_answer(start, {("j", 2): {0}})
    assert partly.status == "failed" and "ranks [1] of generation 2 were launched" in partly.reason
    restart = AppliedCommand("r", "j", 3, "restart")  # a ledger that did not record the ranks
    assert interrupted_answer(restart, {}).status == "failed"
    assert interrupted_answer(restart, {("j", 3): {4}}).status == "done"


def test_an_interrupted_stop_is_done_and_an_interrupted_reattempt_failed():
    assert interrupted_answer(AppliedCommand("x", "j", 1, "stop"), {}).status == "done"
    answer = interrupted_answer(AppliedCommand("y", "j", 1, "reattempt"), {("j", 1): {0}})
    assert answer.status == "failed" and "reattempt" in answer.reason


def test_only_the_newest_applied_command_can_be_unanswered():
    state = ledger()
    assert unanswered(state) == state.newest
    state.answers[state.newest.id] = RecordedAck("done")
    assert unanswered(state) is None
    assert unanswered(LedgerState()) is None
