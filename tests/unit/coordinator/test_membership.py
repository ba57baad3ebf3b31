"""Nodes enroll and are removed without a config edit (issue 45, points 3 and 4): an operator's
enrollment lets the join token register the node; the registration (signed by that token) makes it a
member with its own key, and it takes work only once its executor joined with that key; a removal
takes its jobs off it and its key is trusted no more. Before: membership came only from the YAML
`nodes:`, and a node key trusted by hand counted whatever the operators said."""

from __future__ import annotations

import pytest

from tests.unit.coordinator.test_provenance import record
from tests.unit.coordinator.world import CONFIG, Recorder, of_type, submitted
from trainmedic.recovery.coordinator.core import CoordinatorConfig
from trainmedic.recovery.coordinator.core.lifecycle import new_work_refused, offered, status
from trainmedic.recovery.coordinator.core.state import Rejected
from trainmedic.recovery.coordinator.provenance import Trust, unverified
from trainmedic.recovery.join_token import public_key_model, token_key
from trainmedic.recovery.signing import TrustedKeys, generate
from trainmedic.schemas import CommandAcked, NodeJoined
from trainmedic.schemas.commands import NodeRegistered
from trainmedic.schemas.nodes import NodeEnrolled, NodeRemoved, NodeUncordoned

OPERATOR, COORDINATOR, N2, N7 = (generate() for _ in range(4))
TOKEN, OTHER_TOKEN = token_key(b"\x01" * 32), token_key(b"\x02" * 32)
FOLDER = Trust.of({"operator": TrustedKeys.of(OPERATOR.private.public_key()),
                   "coordinator": TrustedKeys.of(COORDINATOR.private.public_key()),
                   "node:n2": TrustedKeys.of(N2.private.public_key())})


def key(signing) -> object:
    return public_key_model(signing.private.public_key())


def enrolled(node: str = "n7", ts: float = 100.0, token=TOKEN, expires: float = 1000.0) -> NodeEnrolled:
    return OPERATOR.sign(NodeEnrolled(ts=ts, node=node, token=key(token), expires=expires,
                                      coordinators=(key(COORDINATOR),)))


def registered(node: str = "n7", ts: float = 110.0, token=TOKEN, signing=N7) -> NodeRegistered:
    return token.sign(NodeRegistered(ts=ts, node=node, key=key(signing), address="198.18.0.7", gpus=4))


def checked(rec: Recorder, event) -> str | None:
    """Why the adapter would not fold `event` with the folder's keys and the log's membership."""
    why = unverified(record(event), FOLDER.with_members(rec.state))
    return None if why is None else why.kind


def joined_n7(rec: Recorder) -> None:
    for event, now in ((enrolled(), 100.0), (registered(), 110.0)):
        assert checked(rec, event) is None
        rec.feed(event, now=now)


def test_a_registered_node_is_a_member_but_takes_work_only_after_its_executor_joined() -> None:
    rec = Recorder()
    rec.started(now=1.0)
    rec.feed(enrolled(), now=100.0)
    assert "n7" not in rec.state.nodes and not rec.state.in_cluster("n7")  # enrolled: no node yet
    rec.feed(registered(), now=110.0)
    node = rec.state.nodes["n7"]
    assert (rec.state.in_cluster("n7"), node.address, node.gpus) == (True, "198.18.0.7", 4)
    assert status(rec.state, "n7") == "registered" and "n7" not in offered(rec.state)
    assert "has not joined" in new_work_refused(rec.state, "n7")
    join = N7.sign(NodeJoined(ts=120.0, node="n7"))
    assert checked(rec, join) is None  # the key it registered signs for it
    rec.feed(join, now=120.0)
    assert status(rec.state, "n7") == "ready" and "n7" in offered(rec.state)
    assert rec.state.capacity_ts == 120.0  # the pool grew: the next tick re-plans


def test_the_registration_must_be_signed_by_its_own_enrollments_token() -> None:
    rec = Recorder()
    rec.feed(enrolled(), now=100.0)
    rec.feed(enrolled("n8", token=OTHER_TOKEN), now=100.0)
    assert checked(rec, registered(token=OTHER_TOKEN)) == "wrong_node"  # n8's token registering n7
    assert checked(rec, registered(token=token_key(b"\x03" * 32))) == "unknown_key"
    assert checked(rec, registered(node="n9")) == "wrong_node"  # a token of no enrollment of n9
    unsigned = NodeRegistered(ts=110.0, node="n7", key=key(N7), address="a", gpus=1)
    assert checked(rec, unsigned) == "unsigned"
    assert checked(rec, N7.sign(NodeJoined(ts=120.0, node="n7"))) == "unknown_key"  # not registered yet


def test_an_enrollment_not_signed_by_an_operator_admits_no_token() -> None:
    forged = N2.sign(NodeEnrolled(ts=100.0, node="n7", token=key(TOKEN), expires=1000.0,
                                  coordinators=(key(COORDINATOR),)))
    assert unverified(record(forged), FOLDER).kind == "unknown_key"


def test_a_registration_after_the_token_expired_is_rejected() -> None:
    rec = Recorder()
    rec.feed(enrolled(expires=200.0), now=100.0)
    with pytest.raises(Rejected, match="expired"):
        rec.feed(registered(ts=300.0), now=300.0)
    assert not rec.state.in_cluster("n7")


def test_a_removed_node_has_its_job_moved_off_and_its_key_refused() -> None:
    rec = Recorder()
    rec.started(now=1.0)
    assert checked(rec, NodeRemoved(ts=10.0, node="n2")) == "unsigned"
    rec.feed(OPERATOR.sign(NodeRemoved(ts=10.0, node="n2", reason="decommissioned")), now=10.0)
    assert status(rec.state, "n2") == "removed" and "n2" not in offered(rec.state)
    [plan] = of_type(rec.tick(now=10.5), "recovery_planned")
    assert "n2" not in plan.nodes and "n2" in plan.previous
    ack = N2.sign(CommandAcked(ts=11.0, node="n2", command_id="c", job="llm", generation=1, status="done"))
    assert checked(rec, ack) == "revoked"  # its key, trusted by hand in the folder, signs for it no more


def test_a_removal_ends_the_token_and_a_new_enrollment_admits_the_node_again() -> None:
    rec = Recorder()
    joined_n7(rec)
    rec.feed(OPERATOR.sign(NodeRemoved(ts=130.0, node="n7")), now=130.0)
    assert status(rec.state, "n7") == "removed"
    assert checked(rec, N7.sign(NodeJoined(ts=140.0, node="n7"))) == "revoked"
    with pytest.raises(Rejected, match="removed after"):
        rec.feed(registered(ts=140.0), now=140.0)  # the old token, once more
    again = generate()
    rec.feed(enrolled(ts=150.0, token=OTHER_TOKEN), now=150.0)
    rec.feed(registered(ts=160.0, token=OTHER_TOKEN, signing=again), now=160.0)
    assert status(rec.state, "n7") == "registered"
    assert checked(rec, N7.sign(NodeJoined(ts=170.0, node="n7"))) == "unknown_key"  # the old key: gone
    assert checked(rec, again.sign(NodeJoined(ts=170.0, node="n7"))) is None


def test_a_job_may_name_an_enrolled_node_once_it_registered() -> None:
    rec = Recorder()
    with pytest.raises(Rejected, match="not in the cluster"):
        rec.feed(submitted("small", nodes=("n7",), throughput={1: 1e15}), now=1.0)
    joined_n7(rec)
    rec.feed(submitted("small", nodes=("n7",), throughput={1: 1e15}), now=115.0)
    assert "small" in rec.state.jobs


def test_the_config_nodes_keep_their_status() -> None:
    rec = Recorder()
    assert {status(rec.state, node.id) for node in CONFIG.nodes} == {"ready"}


def test_a_key_that_is_no_key_is_rejected_where_it_is_folded() -> None:
    rec = Recorder()
    bad = key(N7).model_copy(update={"public": "AAAA"})
    with pytest.raises(Rejected, match="no Ed25519 public key"):
        rec.feed(OPERATOR.sign(NodeEnrolled(ts=1.0, node="n7", token=bad, expires=9.0,
                                            coordinators=(key(COORDINATOR),))), now=1.0)
    rec.feed(enrolled(), now=100.0)
    with pytest.raises(Rejected, match="no Ed25519 public key"):
        rec.feed(TOKEN.sign(NodeRegistered(ts=110.0, node="n7", key=bad, address="a")), now=110.0)
    FOLDER.with_members(rec.state)  # the trust of every poll is built from what was folded


def test_a_token_registers_once_so_a_leaked_token_cannot_take_over_the_node() -> None:
    rec = Recorder()
    joined_n7(rec)
    thief = generate()
    again = registered(ts=115.0, signing=thief)  # the used token, a key of the thief's own
    assert checked(rec, again) is None  # signed by the token: the fold is what refuses it
    with pytest.raises(Rejected, match="registers once"):
        rec.feed(again, now=115.0)
    assert rec.state.nodes["n7"].key == key(N7)
    rec.feed(registered(), now=116.0)  # the same registration read again: nothing changes


def test_a_registration_outside_its_tokens_span_is_rejected() -> None:
    rec = Recorder()
    rec.feed(enrolled(ts=100.0), now=100.0)
    with pytest.raises(Rejected, match="span"):
        rec.feed(registered(ts=10.0), now=110.0)


def test_a_node_cannot_register_another_nodes_key() -> None:
    rec = Recorder()
    joined_n7(rec)
    rec.feed(enrolled("n8", token=OTHER_TOKEN), now=100.0)
    with pytest.raises(Rejected, match="node n7's"):
        rec.feed(registered("n8", token=OTHER_TOKEN, signing=N7), now=110.0)
    rec2 = Recorder()
    rec2.feed(enrolled("n8", token=OTHER_TOKEN), now=100.0)
    rec2.feed(registered("n8", token=OTHER_TOKEN, signing=N2), now=110.0)  # n2's key, trusted by hand
    ack = N2.sign(CommandAcked(ts=120.0, node="n2", command_id="c", job="llm", generation=0, status="done"))
    assert checked(rec2, ack) is None  # still n2's: n8's claim to it counts for nothing
    assert checked(rec2, N2.sign(NodeJoined(ts=120.0, node="n8"))) == "wrong_node"


def test_a_removal_read_before_the_registration_it_follows_still_removes_the_node() -> None:
    rec = Recorder()
    rec.feed(enrolled(), now=100.0)
    rec.feed(OPERATOR.sign(NodeRemoved(ts=130.0, node="n7")), now=130.0)  # the nodes topic read first
    rec.feed(registered(ts=110.0), now=131.0)
    assert status(rec.state, "n7") == "removed"
    assert checked(rec, N7.sign(NodeJoined(ts=140.0, node="n7"))) == "revoked"


def test_a_revoked_registered_key_is_refused() -> None:
    rec = Recorder()
    joined_n7(rec)
    revoked = FOLDER.without(frozenset({key(N7).key_id}))
    why = unverified(record(N7.sign(NodeJoined(ts=140.0, node="n7"))), revoked.with_members(rec.state))
    assert why.kind == "revoked"


def test_re_enrolling_a_node_keeps_its_registration_valid_on_a_rebuild() -> None:
    rec = Recorder()
    joined_n7(rec)
    rec.feed(enrolled(ts=150.0, token=OTHER_TOKEN), now=150.0)  # a new token, not used
    rebuilt = Recorder()
    for event in (enrolled(), enrolled(ts=150.0, token=OTHER_TOKEN)):
        rebuilt.feed(event, now=150.0)
    assert checked(rebuilt, registered()) is None  # the first token's registration still verifies
    rebuilt.feed(registered(), now=151.0)
    assert rebuilt.state.nodes["n7"].key == rec.state.nodes["n7"].key


def test_without_config_nodes_only_members_are_offered_or_moved() -> None:
    rec = Recorder(CoordinatorConfig())
    rec.feed(NodeJoined(ts=1.0, node="n9"), now=1.0)  # a join from a key trusted by hand, no member
    rec.feed(OPERATOR.sign(NodeUncordoned(ts=2.0, node="n9")), now=2.0)
    assert "n9" not in offered(rec.state) and "n9" not in rec.state.nodes
    joined_n7(rec)
    rec.feed(N7.sign(NodeJoined(ts=120.0, node="n7")), now=120.0)
    assert offered(rec.state) == {"n7"}
