import os
from dataclasses import replace

import torch

from trainmedic.runtime import state_files
from trainmedic.runtime.env import WorkerEnv
from trainmedic.runtime.restore import (
    CHECKPOINT,
    REPLICA,
    Offer,
    choose,
    fallback_warning,
    local_offers,
)
from trainmedic.schemas import RestoreSource


def test_the_newest_state_wins_then_replica_then_lowest_rank():
    assert choose([]) is None
    offers = [Offer(1, 10, REPLICA, "a"), Offer(0, 10, REPLICA, "b"), Offer(0, 10, CHECKPOINT, "c"),
              Offer(2, 9, REPLICA, "d")]
    assert choose(offers).path == "b"
    assert choose([Offer(0, 8, REPLICA, "r"), Offer(0, 12, CHECKPOINT, "c")]).path == "c"
    # generation 3 went back to step 40 (a checkpoint): its timeline, not generation 2's step 50
    assert choose([Offer(0, 50, REPLICA, "g2", 2), Offer(1, 41, REPLICA, "g3", 3)]).path == "g3"


def test_a_generation_that_went_back_is_kept_and_found_newest_over_the_steps_it_left(tmp_path):
    payload = {"step": 0, "model": {}, "optimizer": {}}
    for step in (49, 50):
        state_files.save_keeping(tmp_path, "rank0-", 2, step, payload, keep=2)
    state_files.save_keeping(tmp_path, "rank0-", 3, 41, payload, keep=2)
    assert [(g, s) for g, s, _ in state_files.list_states(tmp_path, "rank0-")] == [(2, 50), (3, 41)]
    (tmp_path / "rank0-step000000060.pt").write_bytes(b"")  # named before generations were: the oldest
    assert state_files.newest(tmp_path, "rank0-")[:2] == (3, 41)


def env(tmp_path, restore: RestoreSource, node="n1", rank=0) -> WorkerEnv:
    return WorkerEnv(master_addr="h", master_port=1, rank=rank, world_size=2, local_rank=rank,
                     local_world_size=2, job="j", node=node, generation=1, restore=restore,
                     checkpoint_dir=str(tmp_path / "ckpt"), snapshot_dir=str(tmp_path / "snap"))


def test_every_rank_offers_its_nodes_newest_snapshot_of_any_rank(tmp_path):
    payload = {"step": 0, "model": {"w": torch.zeros(1)}, "optimizer": {}}
    for step in (3, 4, 5):
        state_files.save_keeping(tmp_path / "snap", "rank0-", 1, step, payload, keep=2)
    state_files.save_keeping(tmp_path / "snap", "rank1-", 1, 6, payload, keep=2)
    state_files.save_keeping(tmp_path / "ckpt", "", 1, 2, payload, keep=3)
    assert len(list((tmp_path / "snap").glob("rank0-*"))) == 2

    named = local_offers(env(tmp_path, RestoreSource(kind="replica", rank=0, node="n1")))
    assert [(o.kind, o.step, o.named) for o in named] == [(REPLICA, 6, True), (CHECKPOINT, 2, False)]
    elsewhere = local_offers(env(tmp_path, RestoreSource(kind="replica", rank=0, node="n9")))
    assert [(o.kind, o.step, o.named) for o in elsewhere] == [(REPLICA, 6, False), (CHECKPOINT, 2, False)]
    from_checkpoint = local_offers(env(tmp_path, RestoreSource(kind="checkpoint")))  # a newer snapshot wins
    assert [(o.kind, o.step, o.named) for o in from_checkpoint] == [(REPLICA, 6, False),
                                                                    (CHECKPOINT, 2, False)]
    assert local_offers(env(tmp_path, RestoreSource(kind="none"))) == []


def test_the_newest_snapshot_wins_even_when_the_source_names_a_node_with_an_older_one(tmp_path):
    """A rank killed at step 22 never saved it: its node holds step 21. The restart after it failed
    at once (generation 1 stepped nothing); the restart after that names the killed rank's node. The
    survivor's step 22 must win, or a completed step is run again (issue 41's `1 step lost`)."""
    payload = {"step": 0, "model": {"w": torch.zeros(1)}, "optimizer": {}}
    state_files.save_keeping(tmp_path / "a" / "snap", "rank0-", 0, 22, payload, keep=2)
    state_files.save_keeping(tmp_path / "b" / "snap", "rank1-", 0, 21, payload, keep=2)
    source = RestoreSource(kind="replica", node="b", rank=1)
    offers = [o for node, rank in (("a", 0), ("b", 1))
              for o in local_offers(replace(env(tmp_path / node, source, node=node, rank=rank),
                                            checkpoint_dir=None))]
    assert [(o.step, o.named) for o in offers] == [(22, False), (21, True)]
    assert choose(offers).step == 22
    assert choose([Offer(1, 22, REPLICA, "b", 0, named=True), Offer(0, 22, REPLICA, "a", 0)]).path == "b"


def test_this_submissions_own_state_wins_over_the_checkpoint_it_resumed_from():
    """The resumed checkpoint was written by another submission at its generation 4: the new one's
    generation 0 snapshots are newer whatever the numbers say."""
    resumed = Offer(0, 1000, CHECKPOINT, "/ckpt/llm/earlier/g4-step000001000.pt", 4, resumed=True)
    own = Offer(0, 1001, REPLICA, "snap/rank0-g0-step000001001.pt", 0)
    assert choose([resumed, own]) is own and choose([resumed]) is resumed


def test_a_restore_that_named_a_replica_and_got_none_is_a_fallback_warning():
    replica = RestoreSource(kind="replica", node="n3", rank=4)
    assert fallback_warning(replica, Offer(0, 9, REPLICA, "snap")) is None
    assert fallback_warning(RestoreSource(kind="checkpoint"), Offer(0, 9, CHECKPOINT, "c")) is None
    assert fallback_warning(RestoreSource(kind="none"), None) is None
    lost = fallback_warning(replica, Offer(2, 65, CHECKPOINT, "/ckpt/step000000065.pt"))
    assert lost == ("no whole replica snapshot on the job's nodes: restored step 65 from the checkpoint "
                    "/ckpt/step000000065.pt; the steps after it are lost")
    assert "started fresh at step 0" in fallback_warning(replica, None)


def test_a_killed_writer_s_temporary_file_goes_and_a_live_one_s_stays(tmp_path):
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    orphan = tmp_path / f".rank0-g1-step000000004.pt.tmp-{gone}"
    live = tmp_path / f".rank0-g1-step000000006.pt.tmp-{os.getpid()}"  # being written
    other = tmp_path / f".rank10-g1-step000000004.pt.tmp-{gone}"  # another rank's
    foreign = tmp_path / f".notes.tmp-{gone}"  # not a state's: never ours to delete
    for path in (orphan, live, other, foreign):
        path.write_bytes(b"half")
    state_files.remove_orphans(tmp_path, "rank0-")
    assert not orphan.exists() and live.exists() and other.exists() and foreign.exists()
