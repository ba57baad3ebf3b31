"""A node rotates its key in place (issue 45, point 4: rotation without downtime): a `node_key_rotated`
signed by the node's current key makes the new key the node's; the old one signs only for
ROTATION_GRACE_S after the rotation (by the broker's time), and rotates nothing. Before: an enrolled
node's key could change only by a removal and a new enrollment, which moved its jobs."""

from __future__ import annotations

import pytest

from tests.unit.coordinator.test_membership import (
    FOLDER,
    N2,
    N7,
    OPERATOR,
    enrolled,
    joined_n7,
    key,
    registered,
)
from tests.unit.coordinator.world import Recorder
from trainmedic.bus.message import Record
from trainmedic.recovery.coordinator.core.fold import apply
from trainmedic.recovery.coordinator.core.membership import ROTATION_GRACE_S
from trainmedic.recovery.coordinator.core.state import Rejected
from trainmedic.recovery.coordinator.provenance import members_first, unverified
from trainmedic.recovery.signing import generate
from trainmedic.schemas import NodeJoined, encode
from trainmedic.schemas.commands import NodeKeyRotated
from trainmedic.schemas.nodes import NodeRemoved

N7_NEW, N7_NEWER = generate(), generate()


def rotation(old=N7, new=N7_NEW, ts: float = 200.0, node: str = "n7") -> NodeKeyRotated:
    return old.sign(NodeKeyRotated(ts=ts, node=node, key=key(new)))


def at(event, appended: float) -> Record:
    return Record("t", 0, 0, None, event, encode(event), timestamp_ms=int(appended * 1000))


def kind(rec: Recorder, event, appended: float) -> str | None:
    why = unverified(at(event, appended), FOLDER.with_members(rec.state))
    return None if why is None else why.kind


def rotated_n7(rec: Recorder) -> None:
    joined_n7(rec)
    assert kind(rec, rotation(), 200.0) is None
    rec.feed(rotation(), now=200.0)


def test_the_new_key_signs_for_the_node_and_the_old_one_only_for_a_grace() -> None:
    rec = Recorder()
    rotated_n7(rec)
    assert rec.state.nodes["n7"].key == key(N7_NEW)
    assert kind(rec, N7_NEW.sign(NodeJoined(ts=210.0, node="n7")), 210.0) is None
    old = N7.sign(NodeJoined(ts=205.0, node="n7"))
    assert kind(rec, old, 200.0 + ROTATION_GRACE_S) is None  # in flight when the node rotated
    assert kind(rec, old, 201.0 + ROTATION_GRACE_S) == "retired"


def test_a_rotation_must_be_signed_by_the_nodes_current_key() -> None:
    rec = Recorder()
    joined_n7(rec)
    assert kind(rec, rotation(old=N2), 200.0) == "wrong_node"  # n2's key rotating n7's
    assert kind(rec, rotation(old=generate()), 200.0) == "unknown_key"
    rec.feed(rotation(), now=200.0)
    again = rotation(old=N7, new=N7_NEWER, ts=210.0)  # the key rotated away from, within its grace
    assert kind(rec, again, 210.0) is None  # it still signs...
    with pytest.raises(Rejected, match="not by the node's current key"):
        apply(rec.state, again, None)  # ...but rotates nothing: a stolen old key takes nothing over
    rec.feed(rotation(old=N7_NEW, new=N7_NEWER, ts=220.0), now=220.0)
    assert rec.state.nodes["n7"].key == key(N7_NEWER)


def test_a_node_cannot_rotate_to_another_nodes_key_nor_after_its_removal() -> None:
    rec = Recorder()
    joined_n7(rec)
    rec.feed(enrolled("n8", token=generate()), now=100.0)
    with pytest.raises(Rejected, match="node n2's"):  # n2's key, trusted by hand: a config node
        rec.state.nodes["n2"].key = key(N2)
        apply(rec.state, rotation(new=N2), None)
    rec.feed(OPERATOR.sign(NodeRemoved(ts=300.0, node="n7")), now=300.0)
    with pytest.raises(Rejected, match="not a node of the cluster"):
        apply(rec.state, rotation(ts=310.0), None)


def test_a_rebuild_folds_a_chain_of_rotations_before_what_the_keys_signed() -> None:
    rec = Recorder()
    log = [at(enrolled(), 100.0), at(registered(), 110.0), at(rotation(), 200.0),
           at(rotation(old=N7_NEW, new=N7_NEWER, ts=300.0), 300.0)]
    trust = members_first(FOLDER, rec.state, log, None, lambda state, event: apply(state, event, None))
    assert rec.state.nodes["n7"].key == key(N7_NEWER)
    for signing, appended, expected in ((N7_NEWER, 400.0, None), (N7_NEW, 300.0 + ROTATION_GRACE_S, None),
                                        (N7, 200.0 + ROTATION_GRACE_S, None), (N7, 900.0, "retired")):
        why = unverified(at(signing.sign(NodeJoined(ts=appended, node="n7")), appended), trust)
        assert (None if why is None else why.kind) == expected, signing.key_id
