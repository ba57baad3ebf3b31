"""The coordinator's log lines say what happened: a completed plan means its commands were
acknowledged (not that the job steps), and a job moved to no nodes is queued, never "up"."""

from __future__ import annotations

from tests.unit.coordinator.world import CONFIG, submitted
from trainmedic.recovery.coordinator.core import ClusterState
from trainmedic.recovery.coordinator.core.state import Job, JobState
from trainmedic.recovery.coordinator.narrate import narrate
from trainmedic.schemas import Incident, JobEnded, RecoveryCompleted, RecoveryPlanned


def planned(nodes: tuple[str, ...]) -> RecoveryPlanned:
    return RecoveryPlanned(ts=5.0, plan_id="p-1", incident_id="lost-1", job="llm", kind="reconfigure",
                           generation=1, nodes=nodes, previous=("n1", "n2"))


def state_with(plan: RecoveryPlanned) -> ClusterState:
    state = ClusterState.initial(CONFIG)
    state.jobs["llm"] = Job(spec=submitted(nodes=("n1", "n2")).job, state=JobState.QUEUED, generation=1,
                            nodes=plan.nodes, plan=plan)
    return state


def test_a_job_moved_to_no_nodes_is_queued_not_up() -> None:
    plan = planned(nodes=())
    [line] = narrate("ack", [RecoveryCompleted(ts=6.0, plan_id="p-1", job="llm", generation=1)],
                     state_with(plan))
    assert line == "ack → plan p-1: llm stopped on every node, queued until nodes free up"
    [issued] = narrate("incident", [plan], state_with(plan))
    assert "[n1 n2] → [] (no nodes: the job stops and is queued)" in issued


def test_a_completed_plan_says_its_commands_were_acknowledged_not_that_the_job_is_up() -> None:
    plan = planned(nodes=("n2", "n3"))
    [line] = narrate("ack", [RecoveryCompleted(ts=6.0, plan_id="p-1", job="llm", generation=1)],
                     state_with(plan))
    assert line == ("ack → plan p-1: every command of llm generation 1 acknowledged (workers started, "
                    "not yet stepping)")
    assert "is up" not in line and "completed" not in line


def test_a_reattempt_acknowledged_is_ranks_retried_in_place() -> None:
    plan = planned(nodes=("n1", "n2")).model_copy(update={"kind": "reattempt"})
    [line] = narrate("ack", [RecoveryCompleted(ts=6.0, plan_id="p-1", job="llm", generation=1)],
                     state_with(plan))
    assert line.endswith("every command of llm generation 1 acknowledged (ranks retried in place)")


def test_an_operators_stop_is_told_as_asked_not_as_queued() -> None:
    plan = planned(nodes=()).model_copy(update={"kind": "stop"})
    [line] = narrate("job_stop", [RecoveryCompleted(ts=6.0, plan_id="p-1", job="llm", generation=1)],
                     state_with(plan))
    assert line == "job_stop → plan p-1: llm stopped on every node, as asked"
    [issued] = narrate("job_stop", [plan], state_with(plan))
    assert "queued" not in issued


def test_a_rejection_frees_no_node_and_a_resolution_is_not_raised() -> None:
    state = ClusterState.initial(CONFIG)
    rejected = JobEnded(ts=6.0, job="ghostly", state="rejected", reason="node n9 not in the cluster")
    resolved = Incident(ts=7.0, id="i2", status="resolved", category="software_error", severity="SEV2",
                        action="restart", job="llm", first_ts=5.0,
                        evidence=("exit 1", "7.000 resolved: job llm ended failed: 4 restarts"))
    assert narrate("job ghostly submitted", [rejected, resolved], state) == [
        "job ghostly submitted → job ghostly rejected: node n9 not in the cluster",
        "job ghostly submitted → resolved incident i2 (SEV2 software_error, job llm): "
        "7.000 resolved: job llm ended failed: 4 restarts"]
