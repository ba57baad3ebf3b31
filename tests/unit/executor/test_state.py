import pytest

from trainmedic.recovery.executor.core.state import (
    ALLOWED,
    GroupState,
    IllegalTransition,
    LocalGroup,
    after_exit,
    fenced_at,
)


def test_every_state_has_a_row_in_the_table():
    assert set(ALLOWED) == set(GroupState)


def test_the_normal_life_of_a_group():
    group = LocalGroup("j", 0).to(GroupState.RUNNING)
    group = group.to(GroupState.STOPPING).to(GroupState.STOPPED).to(GroupState.RUNNING)
    assert group.state == GroupState.RUNNING


@pytest.mark.parametrize(("start", "end"), [
    (GroupState.IDLE, GroupState.STOPPED), (GroupState.STOPPED, GroupState.FAILED),
    (GroupState.STOPPING, GroupState.RUNNING), (GroupState.FAILED, GroupState.RUNNING),
])
def test_illegal_moves_raise(start, end):
    with pytest.raises(IllegalTransition, match=f"{start} -> {end}"):
        LocalGroup("j", 0, start).to(end)


def test_a_failing_rank_fails_the_group_and_clean_exits_succeed_it():
    running = LocalGroup("j", 0, GroupState.RUNNING)
    assert after_exit(running, clean=False, still_alive=1).state == GroupState.FAILED
    assert after_exit(running, clean=True, still_alive=1).state == GroupState.RUNNING
    assert after_exit(running, clean=True, still_alive=0).state == GroupState.SUCCEEDED
    failed = LocalGroup("j", 0, GroupState.FAILED)
    assert after_exit(failed, clean=True, still_alive=0) == failed


def test_generations_never_go_back():
    group = LocalGroup("j", 4)
    assert fenced_at(group, 2).generation == 4
    assert fenced_at(group, 5).generation == 5
