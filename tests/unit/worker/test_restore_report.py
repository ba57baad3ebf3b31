"""The first step after a restore says where the state came from, once; a fresh start says nothing.
A real one-rank gloo group and a real snapshot: the data-parallel path of `Runtime.restore`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from trainmedic.recovery.worker.env import WorkerEnv
from trainmedic.recovery.worker.runtime import Runtime
from trainmedic.schemas import RestoreSource


class Steps:
    """A hook that keeps what `step` was given."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def step(self, step: int, step_time: float, restore_warning: str | None = None,
             restored: dict | None = None) -> None:
        self.calls.append((step, restore_warning, restored))


@pytest.fixture
def group(tmp_path: Path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def runtime(tmp_path: Path, kind: str, hook: Steps | None = None) -> Runtime:
    env = WorkerEnv(master_addr="127.0.0.1", master_port=1, rank=0, world_size=1, local_rank=0,
                    local_world_size=1, job="j", node="n", generation=1, restore=RestoreSource(kind=kind),
                    snapshot_dir=str(tmp_path / "snapshots"))
    return Runtime(env, hook=hook)


def test_the_first_step_after_a_restore_carries_its_report_and_the_next_do_not(tmp_path: Path, group) -> None:
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    runtime(tmp_path, "none").maybe_checkpoint(3, model, optimizer)
    hook = Steps()
    rt = runtime(tmp_path, "replica", hook)
    assert rt.restore(model, optimizer) == 3
    rt.step_done(4, 0.1)
    rt.step_done(5, 0.1)
    (step, warning, restored), later = hook.calls
    assert (step, warning, restored["kind"], restored["step"]) == (4, None, "replica", 3)
    assert later == (5, None, None)
    assert restored["seconds"] >= 0 and "read" not in restored  # a whole state: no shard counts


def test_a_first_start_with_nothing_to_restore_reports_nothing(tmp_path: Path, group) -> None:
    model = torch.nn.Linear(2, 1)
    hook = Steps()
    rt = runtime(tmp_path, "checkpoint", hook)
    assert rt.restore(model, torch.optim.SGD(model.parameters(), lr=0.1)) == 0
    rt.step_done(1, 0.1)
    assert hook.calls == [(1, None, None)]


def test_a_job_submitted_again_over_an_old_checkpoint_dir_saves_above_what_it_resumed(tmp_path: Path,
                                                                                      group) -> None:
    """The earlier run's generation 4 left checkpoints of steps 8-10; the new job starts at
    generation 0, resumes step 10, and its checkpoint of step 11 must be the newest, not pruned."""
    from dataclasses import replace

    from trainmedic.recovery.worker import state_files

    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    shared = replace(runtime(tmp_path, "checkpoint").env, checkpoint_dir=str(tmp_path / "ckpt"))
    earlier = Runtime(replace(shared, generation=4), snapshot_every=0, checkpoint_every=1)
    for step in (8, 9, 10):
        earlier.maybe_checkpoint(step, model, optimizer)
    again = Runtime(replace(shared, generation=0), snapshot_every=0, checkpoint_every=1)
    assert again.restore(model, optimizer) == 10 and again.saves_as == 5
    again.maybe_checkpoint(11, model, optimizer)
    kept = [(g, s) for g, s, _ in state_files.list_states(tmp_path / "ckpt", "")]
    assert kept == [(4, 9), (4, 10), (5, 11)]
    assert Runtime(replace(shared, generation=1)).restore(model, optimizer) == 11
