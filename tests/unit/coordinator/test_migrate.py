"""Which records of an old log the upgrade copies to the recovery topic: the old coordinator's
decisions on incidents and re-admissions on nodes, nothing else; and how a log older than decisions
that name the nodes they isolate is rebuilt."""

from __future__ import annotations

from tests.unit.coordinator.world import LIMITED, Recorder, incident, submitted
from trainmedic.bus.message import RawMessage, Record, parse_message
from trainmedic.recovery.coordinator.core import ClusterState, CoordinatorConfig, apply
from trainmedic.recovery.coordinator.intake import rebuild
from trainmedic.recovery.coordinator.migrate import ImplicitIsolations, legacy
from trainmedic.schemas import NodeCordoned, NodeReadmitted, RecoveryCompleted, Topics, encode

TOPICS = Topics("m.")


def test_only_the_old_coordinators_records_on_incidents_and_nodes_are_copied() -> None:
    stored = [
        (TOPICS.incidents, incident("i1", "SEV2", node="n2")),  # the detector's: stays
        (TOPICS.incidents, RecoveryCompleted(ts=2.0, plan_id="p1", job="llm", generation=0)),
        (TOPICS.nodes, NodeCordoned(ts=3.0, node="n4")),  # an operator's: stays
        (TOPICS.nodes, NodeReadmitted(ts=4.0, node="n2", incident_id="i0")),
        (TOPICS.jobs, submitted()),
    ]
    messages = [RawMessage(topic, 0, offset, 0, b"k", encode(event)) for offset, (topic, event) in
                enumerate(stored)]
    messages.append(RawMessage(TOPICS.incidents, 0, 9, 0, b"k", b'{"type": "recovery_planned"}'))  # invalid
    assert [(m.offset, kind) for m, kind in legacy(TOPICS, messages)] == [
        (1, "recovery_completed"), (3, "node_readmitted")]


def test_a_log_from_before_isolations_were_decisions_still_isolates_its_nodes_on_a_rebuild() -> None:
    rec = Recorder(CoordinatorConfig(**{**LIMITED.model_dump(), "group_window_s": 0}))
    rec.started()
    rec.feed(incident("old", "SEV1", node="n2", job=None, ts=100.0, category="node_lost"), now=100.0)
    old = [((topic, key), e.model_copy(update={"isolated": None}) if e.type in ("recovery_planned",
                                                                                 "recovery_skipped") else e)
           for (topic, key), e in rec.placed()]
    records = [parse_message(TOPICS, TOPICS.name(topic), 0, offset, key.encode(), encode(e), now=0.0)
               for offset, ((topic, key), e) in enumerate(old)]
    assert all(isinstance(r, Record) for r in records)  # the old decisions are valid as they are
    rebuilt = []
    for read in (records, sorted(records, key=lambda r: r.event.type == "incident")):  # either order
        state = ClusterState.initial(rec.state.config)
        assert rebuild(state, read) == []
        rebuilt.append(state)
    assert rebuilt[0] == rebuilt[1]
    assert (rebuilt[0].nodes["n2"].isolated_by, rebuilt[0].nodes["n2"].isolated_ts) == ("old", 100.0)
    bare = ClusterState.initial(rec.state.config)
    for _, e in old:
        apply(bare, e)
    assert bare.nodes["n2"].healthy  # the fold itself reads only decisions that name what they isolate
    upcast = ImplicitIsolations()  # read in parts, as `job status` polls: one upcast for all of them
    state = ClusterState.initial(rec.state.config)
    incident_last = sorted(records, key=lambda r: r.event.type == "incident")
    assert incident_last[-1].event.type == "incident"
    for part in (incident_last[:-1], incident_last[-1:]):  # the decision in one part, its incident next
        rebuild(state, part, upcast)
    assert state == rebuilt[0]


def test_an_old_decision_does_not_isolate_again_a_node_readmitted_before_its_incident_resolved() -> None:
    rec = Recorder(CoordinatorConfig(**{**LIMITED.model_dump(), "group_window_s": 0}))
    rec.started()
    opened = incident("old", "SEV1", node="n2", job=None, ts=100.0, category="node_lost")
    rec.feed(opened, now=100.0)
    fold, state = ImplicitIsolations(), ClusterState.initial(rec.state.config)
    for _, e in rec.placed():
        old = e.type in ("recovery_planned", "recovery_skipped")
        fold.apply(state, e.model_copy(update={"isolated": None}) if old else e)
    assert state.nodes["n2"].isolated_by == "old"
    fold.apply(state, NodeReadmitted(ts=200.0, node="n2", incident_id="old"))
    fold.apply(state, opened.model_copy(update={"status": "resolved", "ts": 300.0}))
    assert state.nodes["n2"].healthy  # the resolution is not the old decision's answer again
