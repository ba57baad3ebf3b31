"""Which nodes Slurm is told to drain and to resume (ops/slurm/drains.py), from the real coordinator
core's state: an isolated node drained with trainmedic's reason, resumed once re-admitted; a drain a
person set never lifted, nor overwritten."""

from __future__ import annotations

from tests.unit.coordinator.world import Recorder, incident
from trainmedic.ops.slurm.drains import MAX_REASON, PREFIX, Change, SlurmNode, changes, parse_sinfo
from trainmedic.schemas.nodes import NodeUncordoned


def isolated_n2() -> Recorder:
    rec = Recorder()
    rec.started(now=1.0)
    evidence = ("50.000 gpu 3: Xid 79 fell off the bus\x1b[2J; rm -rf $(x)",)  # telemetry wrote some of it
    xid = incident("xid-1", "SEV1", node="n2", category="gpu_lost").model_copy(update={"evidence": evidence})
    rec.feed(xid, now=50.0)
    assert rec.state.nodes["n2"].isolated_by == "xid-1"
    return rec


def slurm(**drained: str) -> dict[str, SlurmNode]:
    nodes = {f"n{i}": SlurmNode(f"n{i}", False) for i in range(1, 7)}
    nodes.update({name: SlurmNode(name, True, reason) for name, reason in drained.items()})
    return nodes


def test_an_isolated_node_is_drained_with_the_incident_and_its_evidence_as_plain_words() -> None:
    [change] = changes(isolated_n2().state, slurm())
    assert change.verb == "drain" and change.node == "n2"
    assert change.reason.startswith(f"{PREFIX} gpu_lost gpu 3: Xid 79 fell off the bus")
    assert change.reason.endswith(", incident xid-1")
    assert not set(change.reason) & set("\x1b$;`'\"|&<>\\"), change.reason
    assert len(change.reason) <= MAX_REASON


def test_a_node_drained_already_is_left_as_it_is_whoever_drained_it() -> None:
    state = isolated_n2().state
    assert changes(state, slurm(n2=f"{PREFIX} gpu_lost, incident xid-1")) == []
    assert changes(state, slurm(n2="a person: bad fan")) == []


def test_a_readmitted_node_is_resumed_only_where_trainmedic_set_the_drain() -> None:
    rec = isolated_n2()
    rec.feed(NodeUncordoned(ts=60.0, node="n2", by="ops"), now=60.0)
    assert changes(rec.state, slurm(n2=f"{PREFIX} gpu_lost, incident xid-1")) == [Change("resume", "n2")]
    assert changes(rec.state, slurm(n2="a person: bad fan")) == []
    # a node this deployment does not know, drained by trainmedic elsewhere, is not its to lift
    assert changes(rec.state, {"x9": SlurmNode("x9", True, f"{PREFIX} node_lost, incident i")}) == []


def test_slurm_nodes_are_parsed_from_sinfo_once_each_with_the_drain_flag() -> None:
    text = ("n1|idle|none\nn2|drained*|trainmedic: node_lost, incident a\nn2|drained*|trainmedic: node_lost, "
            "incident a\nn3|draining|a person: fan|x\nn4|down*|Not responding\nn5|mixed|none\ngarbage\n")
    assert parse_sinfo(text) == {
        "n1": SlurmNode("n1", False), "n2": SlurmNode("n2", True, "trainmedic: node_lost, incident a"),
        "n3": SlurmNode("n3", True, "a person: fan|x"), "n4": SlurmNode("n4", False, "Not responding"),
        "n5": SlurmNode("n5", False)}
    assert parse_sinfo(text)["n2"].ours and not parse_sinfo(text)["n3"].ours
