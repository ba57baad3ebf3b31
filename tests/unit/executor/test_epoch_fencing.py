"""Commands of a coordinator whose lease has passed on are refused once a newer one's were applied."""

from trainmedic.recovery.executor.core.decide import Apply, Refuse, Skip, decide
from trainmedic.recovery.executor.ledger import Ledger
from trainmedic.schemas import Command, CommandAction, WorkerSpec

NOW = 1000.0
SPEC = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                  ranks=(0,), world_size=1, master_addr="h", master_port=29500, command=("train",))


def cmd(epoch, id_="c1"):
    return Command(ts=NOW - 1, node="n1", id=id_, job="j", generation=1, action=CommandAction.START,
                   worker=SPEC, epoch=epoch)


def run(command, epoch, applied=()):
    return decide(command, received=None, node="n1", trusted=None, now=NOW, freshness_s=60.0, group=None,
                  applied=applied, epoch=epoch)


def test_an_older_epoch_is_fenced_off_with_both_epochs_named():
    decision = run(cmd(epoch=3), epoch=7)
    assert decision == Refuse("fenced: sent by coordinator epoch 3, this node follows epoch 7")


def test_the_same_or_a_newer_epoch_applies():
    assert isinstance(run(cmd(epoch=7), epoch=7), Apply)
    assert isinstance(run(cmd(epoch=9), epoch=7), Apply)


def test_no_epoch_applies_only_before_any_epoch_was_seen():
    assert isinstance(run(cmd(epoch=None), epoch=None), Apply)
    assert isinstance(run(cmd(epoch=None), epoch=0), Refuse)


def test_a_redelivered_command_of_an_old_epoch_is_a_redelivery_not_a_refusal():
    assert isinstance(run(cmd(epoch=3), epoch=7, applied={"c1"}), Skip)


def test_the_ledger_keeps_the_newest_epoch_across_a_restart(tmp_path):
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger.open(path)
    applied = {"job": "j", "applied": True}
    ledger.record(topic="t", partition=0, offset=0, command_id="a", generation=1, epoch=4, **applied)
    ledger.record(topic="t", partition=0, offset=1, command_id="b", generation=2, epoch=2, **applied)
    ledger.record(topic="t", partition=0, offset=2)  # refused or skipped: no epoch learned
    ledger.close()
    assert Ledger.open(path).state.epoch == 4
