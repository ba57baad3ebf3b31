"""The sharded path's files on one real rank (a one-rank gloo group, FSDP2 on a one-rank mesh):
which snapshots are kept, how a checkpoint lands, and when a step cannot be retried in place."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from trainmedic.runtime import sharded, state_files
from trainmedic.runtime.env import WorkerEnv
from trainmedic.runtime.rank import Runtime
from trainmedic.runtime.snapshot_writer import SnapshotWriter
from trainmedic.schemas import RestoreSource


@pytest.fixture
def job(tmp_path: Path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    torch.manual_seed(0)
    net = fully_shard(torch.nn.Linear(4, 3), mesh=init_device_mesh("cpu", (1,)))
    yield net, torch.optim.AdamW(net.parameters(), lr=0.1)
    dist.destroy_process_group()


def kept(directory: Path) -> list[tuple[int, int]]:
    return [(generation, step) for generation, step, _ in state_files.list_states(directory, "shards")]


def test_the_newest_two_snapshots_by_generation_then_step_are_kept_three_when_written_behind(
    tmp_path: Path, job,
) -> None:
    net, optimizer = job
    state = sharded.flat_state(net, optimizer)
    where = tmp_path / "node"
    for step in (1, 2, 3, 4):
        sharded.snapshot(where, 0, step, 0, state)
    assert kept(where) == [(0, 3), (0, 4)]
    sharded.snapshot(where, 0, 2, 1, state)  # generation 1 went back to step 2: its timeline now
    assert kept(where) == [(0, 4), (1, 2)]
    sharded.snapshot(where, 0, 3, 1, state)
    assert kept(where) == [(1, 2), (1, 3)]
    writer = SnapshotWriter()
    for step in (4, 5, 6):
        sharded.snapshot(where, 0, step, 1, state, writer)
    writer.wait()
    assert kept(where) == [(1, 4), (1, 5), (1, 6)]


def test_a_checkpoint_lands_whole_under_its_step_and_a_dead_generation_s_half_save_goes(
    tmp_path: Path, job,
) -> None:
    net, optimizer = job
    shared = tmp_path / "shared"
    (shared / "step000000002.tmp-g0").mkdir(parents=True)  # generation 0 died half way through a save
    (shared / "step000000009.tmp-g3").mkdir()  # a later generation's, still being written: kept
    for step in (1, 2, 3, 4):
        sharded.checkpoint(shared, step, 1, sharded.flat_state(net, optimizer))
    assert sorted(p.name for p in shared.iterdir()) == [
        "step000000002", "step000000003", "step000000004", "step000000009.tmp-g3"]
    assert [step for step, _ in state_files.dcp_checkpoints(shared)] == [2, 3, 4]


def test_a_step_cannot_be_retried_in_place_without_a_snapshot_of_it(tmp_path: Path, job) -> None:
    net, optimizer = job
    env = WorkerEnv(master_addr="127.0.0.1", master_port=1, rank=0, world_size=1, local_rank=0,
                    local_world_size=1, job="j", node="n", generation=0, restore=RestoreSource(kind="none"),
                    snapshot_dir=str(tmp_path / "node"))
    rt = Runtime(env, snapshot_every=2)
    rt.maybe_checkpoint(2, net, optimizer)
    rt.resync(net, optimizer)  # step 2 is saved: taken back
    rt.maybe_checkpoint(3, net, optimizer)  # not a snapshot step
    with pytest.raises(RuntimeError, match="cannot retry step 3 in place: the newest shard snapshots hold "
                                           "step 2"):
        rt.resync(net, optimizer)


def test_packed_tensors_come_back_whole_across_buffers_dtypes_and_odd_shapes(monkeypatch) -> None:
    monkeypatch.setattr(sharded, "CHUNK", 64)  # 16 floats a buffer: the 5 x 3 and the 20 share none
    tensors = {"a": torch.randn(5, 3), "b": torch.arange(4, dtype=torch.int64), "c": torch.tensor(7.0),
               "d": torch.empty(0, 3), "e": torch.randn(20), "f": torch.randn(2)}
    buffers, index = sharded._pack(tensors)
    assert sorted(buffers) == ["float32-0", "float32-1", "float32-2", "int64-0"]
    back = sharded._unpack(buffers, index)
    assert back.keys() == tensors.keys()
    assert all(torch.equal(back[k], tensors[k]) and back[k].dtype == tensors[k].dtype for k in tensors)


def test_a_snapshot_in_an_older_format_is_not_offered(tmp_path: Path, job) -> None:
    net, optimizer = job
    where = tmp_path / "node"
    sharded.snapshot(where, 0, 4, 0, sharded.flat_state(net, optimizer))
    torch.save({"step": 5, "generation": 0, "boxes": {}, "tensors": {}, "plain": {}},
               where / "shards0-g0-step000000005.pt")  # before snapshots were packed
    env = WorkerEnv(master_addr="127.0.0.1", master_port=1, rank=0, world_size=1, local_rank=0,
                    local_world_size=1, job="j", node="n", generation=1,
                    restore=RestoreSource(kind="replica"), snapshot_dir=str(where))
    assert [f.step for f in sharded.node_files(env)] == [4]
