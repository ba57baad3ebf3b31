"""The fold: a recorded log folds to the live state, in any partition interleaving, and twice is once."""

from __future__ import annotations

import random

import pytest

from tests.unit.coordinator.world import CONFIG, Recorder, incident, of_type, submitted
from trainmedic.recovery.coordinator.core import ClusterState, IllegalTransition, apply
from trainmedic.recovery.signing import generate
from trainmedic.schemas import NodeCordoned, NodeDrained, NodeUncordoned, RecoveryCompleted
from trainmedic.schemas.commands import Placement


def scenario() -> Recorder:
    """Two jobs; a reattempt; a restart that fails and escalates; a retried command; a SEV1."""
    rec = Recorder()
    rec.started(now=1.0)
    rec.ack(rec.feed(submitted("small", nodes=("n5", "n6"), ts=3.0), now=3.0), "done", now=4.0)
    rec.ack(rec.feed(incident("i3", "SEV3", node="n1", ts=20.0), now=20.0), "done", now=21.0)
    out = rec.feed(incident("i2", "SEV2", node="n2", ts=30.0), now=30.0)
    rec.ack(out, "accepted", now=31.0)
    out = rec.ack(of_type(out, "command")[:1], "failed", now=32.0, reason="exit 1")  # escalates
    rec.ack([c for c in of_type(out, "command") if c.node != "n4"], "done", now=33.0)
    rec.tick(now=50.0)  # re-sends the start to n4
    rec.feed(incident("i1", "SEV1", node="n6", ts=60.0), now=60.0)
    rec.feed(incident("w", "WARN", node="n1", ts=61.0), now=61.0)
    rec.feed(incident("i3", "SEV3", node="n1", ts=20.0, status="resolved"), now=62.0)
    return rec


def lifecycle_scenario() -> Recorder:
    """Nodes leave and come back: a cordon, an isolation, an uncordon, a drain, a re-admission."""
    rec = Recorder()
    rec.started(now=1.0)
    rec.feed(NodeCordoned(ts=5.0, node="n4", reason="bios"), now=5.0)
    rec.ack(rec.feed(incident("i1", "SEV1", node="n2", ts=50.0), now=50.0), "done", now=51.0)
    rec.feed(NodeUncordoned(ts=60.0, node="n2"), now=60.0)
    rec.tick(now=61.0)  # nothing pays: a skip
    rec.feed(NodeDrained(ts=70.0, node="n5"), now=70.0)
    rec.ack(rec.tick(now=71.0), "done", now=72.0)
    rec.ack(rec.feed(incident("i4", "SEV1", node="n1", ts=80.0), now=80.0), "done", now=81.0)
    rec.feed(incident("i4", "SEV1", node="n1", ts=90.0, status="resolved"), now=90.0)
    rec.tick(now=400.0)  # re-admits n1
    rec.tick(now=401.0)
    return rec


def test_the_lifecycle_scenario_covers_what_it_claims() -> None:
    log = lifecycle_scenario().log
    kinds = {e.type for e in log}
    assert {"node_cordoned", "node_uncordoned", "node_drained", "node_readmitted"} <= kinds
    assert [s.job for s in of_type(log, "recovery_skipped")] == [None, None]
    assert [p.nodes for p in of_type(log, "recovery_planned")
            if p.incident_id is None and p.kind == "reconfigure"] == [("n1", "n3", "n2")]  # the drain


def fold(events: list) -> ClusterState:
    state = ClusterState.initial(CONFIG)
    for event in events:
        apply(state, event)
    return state


def interleave(placed: list, seed: int) -> list:
    """The jobs topic first, then the per-(topic, key) sequences of `placed` ((topic, key), event)
    interleaved at random, each in order."""
    queues: dict[tuple[str, str], list] = {}
    for where, event in placed:
        queues.setdefault(where, []).append(event)
    jobs = [e for key, q in queues.items() if key[0] == "jobs" for e in q]
    rest = [q for key, q in queues.items() if key[0] != "jobs"]
    rng, out = random.Random(seed), []
    while rest:
        queue = rng.choice(rest)
        out.append(queue.pop(0))
        if not queue:
            rest.remove(queue)
    return jobs + out


def test_the_scenario_covers_what_it_claims() -> None:
    log = scenario().log
    kinds = {e.kind for e in of_type(log, "recovery_planned")}
    assert kinds == {"start", "reattempt", "restart", "reconfigure"}
    assert of_type(log, "recovery_failed") and of_type(log, "recovery_completed")
    ids = [c.id for c in of_type(log, "command")]
    assert len(ids) > len(set(ids))  # a re-send


@pytest.mark.parametrize("recorded", [scenario, lifecycle_scenario])
def test_refolding_the_recorded_log_gives_the_live_state(recorded) -> None:
    rec = recorded()
    assert fold(rec.log) == rec.state


@pytest.mark.parametrize("recorded", [scenario, lifecycle_scenario])
def test_the_log_as_sent_signed_for_its_deployment_folds_to_the_live_state(recorded) -> None:
    """The coordinator folds its decisions before it signs them; read back signed (escalation
    incidents and re-admissions included), they fold the same."""
    rec, key = recorded(), generate()
    sent = [key.sign(e.model_copy(update={"deployment": "prod."})) for e in rec.log]
    assert of_type(sent, "recovery_planned")
    assert fold(sent) == rec.state


def test_commands_read_back_with_their_signed_placements_fold_to_the_live_state() -> None:
    """A start or restart is sent with the signed placement of its ranks (kafka_adapter `_placement`),
    made as it is signed: read back, it folds as the command the coordinator decided."""
    rec, key = scenario(), generate()

    def sent(event):
        if event.type == "command" and event.worker is not None:
            placement = key.sign(Placement(job=event.job, generation=event.generation, node=event.node,
                                           ranks=event.worker.ranks, deployment="prod."))
            event = event.model_copy(update={"placement": placement})
        return key.sign(event.model_copy(update={"deployment": "prod."}))

    log = [sent(e) for e in rec.log]
    assert any(getattr(e, "placement", None) is not None for e in log)
    assert fold(log) == rec.state


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("recorded", [scenario, lifecycle_scenario])
def test_any_interleaving_of_partitions_folds_to_the_same_state(recorded, seed: int) -> None:
    rec = recorded()
    assert fold(interleave(rec.placed(), seed)) == rec.state


def test_the_interleavings_include_acks_before_their_commands() -> None:
    def early(log: list) -> bool:
        seen = set()
        for event in log:
            if event.type == "command":
                seen.add(event.id)
            elif event.type == "ack" and event.command_id not in seen:
                return True
        return False

    rec = scenario()
    assert not early(rec.log) and sum(early(interleave(rec.placed(), seed)) for seed in range(20)) >= 5


@pytest.mark.parametrize("recorded", [scenario, lifecycle_scenario])
def test_every_event_twice_is_every_event_once(recorded) -> None:
    rec = recorded()
    assert fold([e for event in rec.log for e in (event, event)]) == rec.state


def test_an_illegal_job_move_raises() -> None:
    rec = Recorder()
    rec.feed(submitted(), now=1.0)
    plan = rec.state.jobs["llm"].plan
    apply(rec.state, RecoveryCompleted(ts=2.0, plan_id=plan.plan_id, job="llm", generation=0))
    rival = plan.model_copy(update={"plan_id": "another-start"})
    with pytest.raises(IllegalTransition, match="cannot go from running to starting"):
        apply(rec.state, rival)
