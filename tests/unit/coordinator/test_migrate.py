"""Which records of an old log the upgrade copies to the recovery topic: the old coordinator's
decisions on incidents and re-admissions on nodes, nothing else."""

from __future__ import annotations

from tests.unit.coordinator.world import incident, submitted
from trainmedic.bus.message import RawMessage
from trainmedic.recovery.coordinator.migrate import legacy
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
