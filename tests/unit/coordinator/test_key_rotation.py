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
from trainmedic.recovery.join_token import token_key
from trainmedic.recovery.signing import generate
from trainmedic.schemas import NodeJoined, encode
from trainmedic.schemas.commands import NodeKeyRotated
from trainmedic.schemas.nodes import NodeRemoved

N7_NEW, N7_NEWER = generate(), generate()
OTHER = token_key(b"\x05" * 32)  # n8's join token


def rotation(old=N7, new=N7_NEW, ts: float = 200.0, node: str = "n7") -> NodeKeyRotated:
    return old.sign(NodeKeyRotated(ts=ts, node=node, key=key(new)))


def at(event, appended: float) -> Record:
    return Record("t", 0, 0, None, event, encode(event), timestamp_ms=int(appended * 1000))


def kind(rec: Recorder, event, appended: float) -> str | None:
    why = unverified(at(event, appended), FOLDER.with_members(rec.state), None, rec.state)
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
    assert kind(rec, rotation(old=N2), 200.0) == "unknown_key"  # n2's key rotating n7's
    assert kind(rec, rotation(old=generate()), 200.0) == "unknown_key"
    rec.feed(rotation(), now=200.0)
    again = rotation(old=N7, new=N7_NEWER, ts=210.0)  # the key rotated away from, within its grace
    assert kind(rec, N7.sign(NodeJoined(ts=210.0, node="n7")), 210.0) is None  # it still signs reports...
    assert kind(rec, again, 210.0) == "unknown_key"  # ...but no rotation: a stolen old key takes nothing over
    with pytest.raises(Rejected, match="not by the node's current key"):
        apply(rec.state, again, None)
    rec.feed(rotation(old=N7_NEW, new=N7_NEWER, ts=220.0), now=220.0)
    assert rec.state.nodes["n7"].key == key(N7_NEWER)


def test_a_node_rotates_to_no_key_any_node_had_nor_after_its_removal_nor_by_a_replay() -> None:
    rec = Recorder()
    joined_n7(rec)
    n8 = generate()
    rec.feed(enrolled("n8", token=OTHER), now=100.0)
    rec.feed(registered("n8", token=OTHER, signing=n8), now=110.0)
    with pytest.raises(Rejected, match="is node n8's"):
        apply(rec.state, rotation(new=n8), None)
    rec.feed(rotation(), now=200.0)
    with pytest.raises(Rejected, match="a key the node had"):
        apply(rec.state, rotation(old=N7_NEW, new=N7, ts=210.0), None)  # back to the key rotated away from
    with pytest.raises(Rejected, match="a replay"):
        apply(rec.state, rotation(old=N7_NEW, new=N7_NEWER, ts=150.0), None)
    rec.feed(OPERATOR.sign(NodeRemoved(ts=300.0, node="n7")), now=300.0)
    with pytest.raises(Rejected, match="not an enrolled node|removed"):
        apply(rec.state, rotation(old=N7_NEW, new=N7_NEWER, ts=310.0), None)


def test_a_node_whose_keys_are_trusted_by_hand_does_not_rotate_on_the_log() -> None:
    rec = Recorder()  # n2: a config node, its key in the coordinator's keys folder
    with pytest.raises(Rejected, match="not an enrolled node"):
        apply(rec.state, rotation(old=N2, node="n2"), None)
    assert kind(rec, rotation(old=N2, node="n2"), 200.0) == "unknown_key"  # checked against the state


def test_a_retired_key_signs_nothing_the_broker_did_not_stamp() -> None:
    rec = Recorder()
    rotated_n7(rec)
    old = N7.sign(NodeJoined(ts=205.0, node="n7"))
    unstamped = Record("t", 0, 0, None, old, encode(old))
    assert unverified(unstamped, FOLDER.with_members(rec.state)).kind == "retired"


def test_a_rebuild_folds_a_chain_of_rotations_before_what_the_keys_signed() -> None:
    rec = Recorder()
    n8_stealing = registered("n8", ts=250.0, token=OTHER, signing=N7_NEW)  # n7's new key, after its rotation
    log = [at(enrolled(), 100.0), at(enrolled("n8", token=OTHER), 100.0), at(registered(), 110.0),
           at(rotation(), 200.0), at(n8_stealing, 250.0),
           at(rotation(old=N7_NEW, new=N7_NEWER, ts=300.0), 300.0)]
    trust = members_first(FOLDER, rec.state, log, None, lambda state, event: apply(state, event, None))
    assert rec.state.nodes["n7"].key == key(N7_NEWER) and "n8" not in rec.state.members  # as when read live
    for signing, appended, expected in ((N7_NEWER, 400.0, None), (N7_NEW, 300.0 + ROTATION_GRACE_S, None),
                                        (N7, 200.0 + ROTATION_GRACE_S, None), (N7, 900.0, "retired")):
        why = unverified(at(signing.sign(NodeJoined(ts=appended, node="n7")), appended), trust)
        assert (None if why is None else why.kind) == expected, signing.key_id
