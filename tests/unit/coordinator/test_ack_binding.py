"""An ack is an answer only to the command it can belong to: forged, misaddressed and planted acks
change nothing, and acks for unknown commands cannot grow without bound."""

from __future__ import annotations

import pytest

from trainmedic.recovery.coordinator.core import ClusterState, CommandStatus, JobState, react
from trainmedic.recovery.coordinator.core.fold import MAX_ACKS_PER_COMMAND, MAX_EARLY_ACKS, UnboundAck, apply
from trainmedic.schemas import CommandAcked

from .world import CONFIG, Recorder, of_type, submitted


def answer(command, status: str = "done", ts: float = 2.0, **changes) -> CommandAcked:
    fields = dict(ts=ts, node=command.node, command_id=command.id, job=command.job,
                  generation=command.generation, status=status)
    return CommandAcked(**{**fields, **changes})


@pytest.fixture
def started() -> tuple[Recorder, list]:
    rec = Recorder()
    return rec, of_type(rec.feed(submitted(ts=1.0), now=1.0), "command")


@pytest.mark.parametrize("forged", [{"node": "n5"}, {"job": "other"}, {"generation": 3}])
def test_an_ack_from_another_node_job_or_generation_is_refused(started, forged):
    rec, starts = started
    with pytest.raises(UnboundAck, match="went to n"):
        react(rec.state, answer(starts[0], "failed", **forged), now=2.0)
    assert rec.state.commands[starts[0].id].status is CommandStatus.ISSUED


def test_a_failed_ack_planted_before_the_job_existed_does_not_fail_its_start():
    state = ClusterState.initial(CONFIG)
    rec = Recorder()
    starts = of_type(rec.feed(submitted(ts=5000.0), now=5000.0), "command")
    for command in starts:  # the ids are predictable: planted an hour before the job is submitted
        apply(state, answer(command, "failed", ts=1400.0, reason="planted"))
    for event in rec.log:
        apply(state, event)
    assert {r.status for r in state.commands.values()} == {CommandStatus.ISSUED}
    assert state.jobs["llm"].state is JobState.STARTING


def test_a_failed_ack_planted_with_a_far_future_stamp_does_not_fail_the_start_either():
    state = ClusterState.initial(CONFIG)
    rec = Recorder()
    starts = of_type(rec.feed(submitted(ts=5000.0), now=5000.0), "command")
    for command in starts:  # stamped far ahead, so that no "before the command" check can see it
        apply(state, answer(command, "failed", ts=9.9e9, reason="planted"))
    for event in rec.log:
        apply(state, event)
    assert {r.status for r in state.commands.values()} == {CommandStatus.ISSUED}


def test_an_early_ack_that_is_an_answer_still_counts(started):
    rec, starts = started
    state = ClusterState.initial(CONFIG)
    apply(state, submitted(ts=1.0))
    apply(state, answer(starts[0], "done", ts=2.0))  # read before its command: another partition
    for command in starts:
        apply(state, command)
    assert state.commands[starts[0].id].status is CommandStatus.DONE


def test_acks_for_unknown_commands_are_bounded():
    state = ClusterState.initial(CONFIG)
    for i in range(MAX_EARLY_ACKS + 50):
        apply(state, CommandAcked(ts=1.0, node="n1", command_id=f"cmd-{i}", job="j", generation=0,
                                  status="failed"))
    for _ in range(3 * MAX_ACKS_PER_COMMAND):
        apply(state, CommandAcked(ts=1.0, node="n1", command_id="cmd-x", job="j", generation=0,
                                  status="failed"))
    assert len(state.early_acks) == MAX_EARLY_ACKS
    assert "cmd-50" not in state.early_acks and f"cmd-{MAX_EARLY_ACKS + 49}" in state.early_acks
    assert len(state.early_acks["cmd-x"]) == MAX_ACKS_PER_COMMAND
