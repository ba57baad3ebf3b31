"""The fold keeps each job's steps not done, in any order the plan, its commands and their acks are
read in, so that `completion` reads only those and answers as a look at every step would."""

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.coordinator.world import CONFIG, submitted
from trainmedic.recovery.coordinator.core import ClusterState, apply, react
from trainmedic.recovery.coordinator.core.decide import completion
from trainmedic.recovery.coordinator.core.state import CommandStatus
from trainmedic.schemas import CommandAcked
from trainmedic.schemas.recovery import RecoveryCompleted, RecoverySkipped


def every_step(state: ClusterState, job) -> list:
    """`completion` as it was: every step to a node awaited must be done."""
    for cid, step in job.steps.items():
        record = state.commands.get(cid)
        if state.awaited(step.node) and (record is None or record.status is not CommandStatus.DONE):
            return []
    return [RecoveryCompleted(ts=5.0, plan_id=job.plan.plan_id, job=job.spec.id, generation=job.generation)]


@st.composite
def logs(draw):
    """A started job's plan, its commands, answers to some of them and maybe an isolated node,
    shuffled as partitions may deliver them."""
    live = ClusterState.initial(CONFIG)
    decided = react(live, submitted(), 0.0)
    commands = [e for e in decided if e.type == "command"]
    answers = []
    for command in commands:
        for status in draw(st.lists(st.sampled_from(["accepted", "done", "failed"]), max_size=2)):
            answers.append(CommandAcked(ts=1.0, node=command.node, command_id=command.id, job=command.job,
                                        generation=command.generation, status=status, reason="x"))
    isolated = [RecoverySkipped(ts=1.0, incident_id="i-1", reason="t", isolated={node: "i-1"})
                for node in draw(st.lists(st.sampled_from(["n1", "n2", "n3"]), max_size=1))]
    return draw(st.permutations([*decided, *answers, *isolated]))


@settings(max_examples=300, deadline=None)
@given(logs())
def test_completion_reads_only_the_outstanding_steps(log):
    state = ClusterState.initial(CONFIG)
    apply(state, submitted())
    for event in log:
        apply(state, event)
        job = state.jobs["llm"]
        assert job.outstanding == {cid for cid in job.steps if (record := state.commands.get(cid)) is None
                                   or record.status is not CommandStatus.DONE}
        if job.plan is not None:
            assert completion(state, job, 5.0) == every_step(state, job)
