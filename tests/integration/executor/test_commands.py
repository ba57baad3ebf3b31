"""Command handling through a real broker, with no training ranks: refusals, acks, at-most-once."""

import pytest

from trainmedic.schemas import AckStatus, Command, CommandAction


def command(id_: str, action=CommandAction.STOP, *, node="n1", generation=0, ts=None) -> Command:
    import time

    return Command(ts=ts or time.time(), node=node, id=id_, job="j", generation=generation, action=action)


def acks_of(events, command_id):
    return [e for e in events.seen if e.type == "ack" and e.command_id == command_id]


@pytest.mark.kafka
def test_forged_stale_and_fenced_commands_are_refused_with_a_reason(start_executor, send, events, caplog):
    from prometheus_client import REGISTRY

    from trainmedic.recovery.signing import generate

    def unverified() -> float:
        return REGISTRY.get_sample_value("trainmedic_executor_unverified_commands_total") or 0.0

    unverified_before = unverified()
    start_executor()
    attacker = generate()  # a key pair of its own: the executor trusts only the coordinator's public key
    send(command("forged"), key=attacker)
    send(command("unsigned"), key=None)
    send(command("stale", ts=1_000.0))
    send(command("g5", generation=5))
    send(command("g4", generation=4))
    refused = {}
    for cid in ("forged", "unsigned", "stale", "g4"):
        ack = events.wait_for(lambda e, cid=cid: e.type == "ack" and e.command_id == cid)
        refused[cid] = ack
    assert all(ack.status == AckStatus.REFUSED for ack in refused.values())
    assert f"unknown key id '{attacker.key_id}'" in refused["forged"].reason
    assert "unsigned" in refused["unsigned"].reason
    assert unverified() - unverified_before == 2
    assert any("forged" in r.message and "REFUSED: unknown key id" in r.message for r in caplog.records)
    assert "stale" in refused["stale"].reason
    assert "fenced" in refused["g4"].reason
    done = events.wait_for(lambda e: e.type == "ack" and e.command_id == "g5" and e.status == "done")
    assert done.node == "n1" and done.elapsed_s is not None
    assert [a.status for a in acks_of(events, "g5")] == [AckStatus.ACCEPTED, AckStatus.DONE]


@pytest.mark.kafka
def test_each_executor_takes_only_its_own_nodes_commands(start_executor, send, events):
    start_executor("n1")
    start_executor("n2")
    send(command("for-n1", node="n1"))
    send(command("for-n2", node="n2"))
    send(command("for-n3", node="n3"))  # no executor: nobody may answer
    one = events.wait_for(lambda e: e.type == "ack" and e.command_id == "for-n1" and e.status == "done")
    two = events.wait_for(lambda e: e.type == "ack" and e.command_id == "for-n2" and e.status == "done")
    assert (one.node, two.node) == ("n1", "n2")
    assert acks_of(events, "for-n3") == []
    assert len(acks_of(events, "for-n1")) == 2 and len(acks_of(events, "for-n2")) == 2
    # every ack is signed by its own node's key (accepted and done alike), and by no other's
    from tests.integration.executor.conftest import node_key
    from trainmedic.recovery.signing import TrustedKeys
    from trainmedic.schemas import encode

    n1, n2 = (TrustedKeys.of(node_key(n).private.public_key()) for n in ("n1", "n2"))
    assert [n1.check(encode(a), "ack") for a in acks_of(events, "for-n1")] == [None, None]
    assert [n2.check(encode(a), "ack") for a in acks_of(events, "for-n2")] == [None, None]
    assert all("unknown key id" in n2.check(encode(a), "ack") for a in acks_of(events, "for-n1"))


@pytest.mark.kafka
def test_a_restarted_executor_does_not_reapply_and_only_repeats_its_last_answer(start_executor, send, events):
    first = start_executor()
    send(command("once"))
    events.wait_for(lambda e: e.type == "ack" and e.command_id == "once" and e.status == "done")
    first.stop()
    start_executor()  # same state dir: the ledger remembers "once" and the position after it
    send(command("after"))
    events.wait_for(lambda e: e.type == "ack" and e.command_id == "after" and e.status == "done")
    # accepted, done, and done once more at the restart (it cannot know the first got out; the
    # coordinator ignores a repeat), and it was not applied again: no second accepted
    assert [a.status for a in acks_of(events, "once")] == ["accepted", "done", "done"]
