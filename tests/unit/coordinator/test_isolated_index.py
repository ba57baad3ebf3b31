"""The fold keeps the ids of the isolated nodes, whatever order isolations and returns are read in,
so that a tick looks for re-admissions among those and not through every node."""

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.coordinator.world import CONFIG
from trainmedic.recovery.coordinator.core import ClusterState, apply
from trainmedic.schemas.nodes import NodeReadmitted, NodeUncordoned
from trainmedic.schemas.recovery import RecoverySkipped

NODES = [node.id for node in CONFIG.nodes]


@st.composite
def node_events(draw):
    events = []
    for i in range(draw(st.integers(0, 12))):
        node, ts = draw(st.sampled_from(NODES)), float(draw(st.integers(0, 5)))
        match draw(st.sampled_from(["isolated", "uncordoned", "readmitted"])):
            case "isolated":
                events.append(RecoverySkipped(ts=ts, incident_id=f"i-{i}", reason="t",
                                              isolated={node: f"i-{i}"}))
            case "uncordoned":
                events.append(NodeUncordoned(ts=ts, node=node))
            case "readmitted":
                events.append(NodeReadmitted(ts=ts, node=node, incident_id=f"i-{i}"))
    return events


@settings(max_examples=300, deadline=None)
@given(node_events())
def test_the_isolated_ids_are_the_nodes_out_of_service(events):
    state = ClusterState.initial(CONFIG)
    for event in events:
        apply(state, event)
        assert state.isolated == {node.id for node in state.nodes.values() if not node.healthy}
