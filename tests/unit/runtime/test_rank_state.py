"""A rank's own state (RNG streams, data position) saved with its snapshot and taken back on a
restore onto the same world size, and only then."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from trainmedic.runtime import rank_state
from trainmedic.runtime.env import WorkerEnv
from trainmedic.runtime.rank import Runtime
from trainmedic.schemas import RestoreSource


class Sampler:
    """A data position: the index of the next batch."""

    def __init__(self) -> None:
        self.position = 0

    def next(self) -> int:
        self.position += 1
        return self.position - 1

    def state_dict(self) -> dict:
        return {"position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.position = state["position"]


def draws() -> tuple[list[float], float]:
    return torch.rand(3).tolist(), random.random()


def test_the_streams_and_the_position_come_back_as_they_were_saved() -> None:
    torch.manual_seed(1)
    random.seed(1)
    sampler = Sampler()
    sampler.next()
    saved = rank_state.capture(4, sampler, None)
    expected, position = draws(), sampler.position
    sampler.next()
    assert rank_state.apply(saved, 4, sampler, None) == (True, "RNG and data position restored")
    assert (draws(), sampler.position) == (expected, position)
    assert rank_state.apply(rank_state.capture(4, None, None), 4, sampler, None) == (
        True, "RNG restored; no data position was saved")


def test_another_world_size_or_no_file_takes_nothing_back() -> None:
    saved = rank_state.capture(4, Sampler(), None)
    sampler = Sampler()
    sampler.next()
    after = torch.get_rng_state()
    assert rank_state.apply(saved, 6, sampler, None) == (
        False, "RNG and data position not restored (saved at world size 4, now 6)")
    assert rank_state.apply(None, 4, sampler, None, "a checkpoint holds neither") == (
        False, "RNG and data position not restored (a checkpoint holds neither)")
    assert sampler.position == 1 and torch.equal(torch.get_rng_state(), after)


class Cursor:
    """A position a snapshot cannot keep: loading it would unpickle this class."""


class OddSampler(Sampler):
    def state_dict(self) -> dict:
        return {"cursor": Cursor()}


def test_a_data_state_no_restore_could_read_is_refused_when_saved() -> None:
    with pytest.raises(TypeError, match=r"OddSampler.state_dict\(\) holds what a snapshot cannot keep"):
        rank_state.capture(2, OddSampler(), None)


def test_a_missing_or_torn_file_reads_as_nothing(tmp_path: Path) -> None:
    assert rank_state.read(tmp_path / "none.pt") is None
    (tmp_path / "torn.pt").write_bytes(b"PK\x03\x04 torn")
    assert rank_state.read(tmp_path / "torn.pt") is None


@pytest.fixture
def group(tmp_path: Path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def runtime(tmp_path: Path, kind: str) -> Runtime:
    env = WorkerEnv(master_addr="127.0.0.1", master_port=1, rank=0, world_size=1, local_rank=0,
                    local_world_size=1, job="j", node="n", generation=1, restore=RestoreSource(kind=kind),
                    snapshot_dir=str(tmp_path / "snapshots"))
    return Runtime(env)


def test_a_data_parallel_restart_resumes_the_rank_s_streams_and_data(tmp_path: Path, group) -> None:
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    sampler = Sampler()
    torch.manual_seed(5)
    before = runtime(tmp_path, "none")
    for step in range(3):
        sampler.next()
        before.maybe_checkpoint(step + 1, model, optimizer, data=sampler)
    expected = draws()  # what step 3 would have drawn, had nothing happened
    torch.manual_seed(0)  # the restarted process seeds afresh
    fresh = Sampler()
    rt = runtime(tmp_path, "replica")
    assert rt.restore(model, optimizer, data=fresh) == 3
    assert (draws(), fresh.position) == (expected, 3)
    assert rt.own_state == "RNG and data position restored"
    env = replace(runtime(tmp_path, "checkpoint").env, checkpoint_dir=str(tmp_path / "shared"))
    Runtime(env, snapshot_every=0, checkpoint_every=3).maybe_checkpoint(3, model, optimizer, data=sampler)
    checkpointed = Runtime(replace(env, snapshot_dir=None))  # a node without the snapshots
    assert checkpointed.restore(model, optimizer, data=fresh) == 3
    assert checkpointed.own_state == "RNG and data position not restored (a checkpoint holds neither)"


def test_a_file_of_that_step_left_by_a_timeline_the_job_went_back_from_is_not_taken(tmp_path: Path,
                                                                                   group) -> None:
    from trainmedic.runtime import state_files

    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    stale = Sampler()
    stale.position = 99
    old = runtime(tmp_path, "none")
    Runtime(replace(old.env, generation=0)).maybe_checkpoint(3, model, optimizer, data=stale)  # rank 0, gen 0
    restored = {"step": 3, "generation": 1, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "own": rank_state.capture(1, Sampler(), None)}  # what generation 1's rank 1 saved at step 3
    state_files.save_keeping(tmp_path / "snapshots", "rank1-", 1, 3, restored, 2)
    rt = Runtime(replace(old.env, generation=2, restore=RestoreSource(kind="replica", rank=1)))
    fresh = Sampler()
    assert rt.restore(model, optimizer, data=fresh) == 3
    assert rt.restored_from.path.endswith("rank1-g1-step000000003.pt")
    assert fresh.position == 0
    assert rt.own_state == f"RNG and data position not restored ({rank_state.MISSING})"


def test_a_run_whose_data_state_no_snapshot_could_keep_is_stopped_at_its_first_snapshot(tmp_path: Path,
                                                                                        group) -> None:
    model = torch.nn.Linear(2, 1)
    rt = runtime(tmp_path, "none")
    with pytest.raises(TypeError, match="OddSampler"):
        rt.maybe_checkpoint(1, model, torch.optim.SGD(model.parameters(), lr=0.1), data=OddSampler())
    assert not list((tmp_path / "snapshots").glob("*.pt"))  # no snapshot no restore could read
