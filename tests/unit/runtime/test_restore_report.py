"""The first step after a restore says where the state came from, once; a fresh start says nothing.
A real one-rank gloo group and a real snapshot: the data-parallel path of `Runtime.restore`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from trainmedic.runtime.env import WorkerEnv
from trainmedic.runtime.rank import Runtime
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


def submission(tmp_path: Path, name: str, generation: int = 0, kind: str = "checkpoint",
               resume: str | None = None) -> Runtime:
    """A rank of submission `name` of job j, whose checkpoints go to ckpt/NAME (as its executor
    sets TRAINMEDIC_CHECKPOINT_DIR), checkpointing every step."""
    from dataclasses import replace

    env = replace(runtime(tmp_path / name, kind).env, generation=generation, resume=resume,
                  checkpoint_dir=str(tmp_path / "ckpt" / "j" / name), submission=name)
    return Runtime(env, snapshot_every=0, checkpoint_every=1)


def test_a_new_submission_never_restores_what_an_earlier_one_left(tmp_path: Path, group) -> None:
    """The earlier submission of the job id got to generation 4 and step 10; the new one, restarting
    from checkpoints at its generation 1, has none of its own: it starts afresh, and says so."""
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    earlier = submission(tmp_path, "20261201T000000.000Z-aaaaaaaa", generation=4)
    for step in (8, 9, 10):
        earlier.maybe_checkpoint(step, model, optimizer)
    again = submission(tmp_path, "20261205T000000.000Z-bbbbbbbb", generation=1)
    assert again.restore(model, optimizer) == 0 and again.restored_from is None


def test_resume_latest_takes_the_newest_earlier_checkpoint_then_only_the_submissions_own(tmp_path: Path,
                                                                                         group) -> None:
    from trainmedic.runtime import state_files

    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for name, steps in (("20261130T000000.000Z-00000000", (20,)), ("20261201T000000.000Z-aaaaaaaa", (9, 10))):
        earlier = submission(tmp_path, name, generation=4)
        for step in steps:
            earlier.maybe_checkpoint(step, model, optimizer)
    (tmp_path / "ckpt" / "j" / "20261202T000000.000Z-cccccccc").mkdir()  # one that wrote nothing
    name = "20261205T000000.000Z-bbbbbbbb"
    again = submission(tmp_path, name, resume="latest")
    assert again.restore(model, optimizer) == 10 and again.restored_from.resumed
    again.maybe_checkpoint(11, model, optimizer)  # saved as generation 0, in its own directory
    assert [(g, s) for g, s, _ in state_files.list_states(tmp_path / "ckpt" / "j" / name, "")] == [(0, 11)]
    # and snapshot at once, though snapshot_every is 0: the submission has state of its own
    assert (tmp_path / name / "snapshots" / "rank0-g0-step000000011.pt").exists()
    again.maybe_checkpoint(12, model, optimizer)
    assert not (tmp_path / name / "snapshots" / "rank0-g0-step000000012.pt").exists()
    later = submission(tmp_path, name, generation=1, resume="latest")
    assert later.restore(model, optimizer) == 12 and not later.restored_from.resumed


@pytest.mark.parametrize(("saved", "words"), [
    ({"model": torch.nn.Linear(3, 1).state_dict()},
     "another model: weight is (1, 3) there and (1, 2) here (1 of 2 tensors differ in shape)"),
    ({"model": {"w": torch.zeros(1)}},
     "another model: bias is not in it (2 of this model's tensors are not); it holds w, which this model"),
    ({"world_size": 8}, "it was written by 8 ranks and this job runs 1"),
    ({"world_size": None}, "it does not say which world size wrote it"),
])
def test_a_resume_onto_another_model_or_world_size_fails_loudly(tmp_path: Path, group, saved, words) -> None:
    from trainmedic.runtime import resume, state_files

    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    payload = {"step": 10, "generation": 4, "world_size": 1, "model": model.state_dict(),
               "optimizer": optimizer.state_dict(), **saved}
    if payload["world_size"] is None:
        del payload["world_size"]
    earlier = tmp_path / "ckpt" / "j" / "20261201T000000.000Z-aaaaaaaa"
    state_files.save_keeping(earlier, "", 4, 10, payload, keep=3)
    again = submission(tmp_path, "20261205T000000.000Z-bbbbbbbb", resume="latest")
    with pytest.raises(resume.ResumeRefused, match=re.escape(words)):
        again.restore(model, optimizer)


def test_a_resume_with_nothing_to_resume_from_fails_loudly(tmp_path: Path, group) -> None:
    from trainmedic.runtime import resume

    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(resume.ResumeRefused, match="no earlier submission of job j wrote a checkpoint"):
        submission(tmp_path, "20261205T000000.000Z-bbbbbbbb", resume="latest").restore(model, optimizer)
    with pytest.raises(resume.ResumeRefused, match="no checkpoint this job can read there"):
        submission(tmp_path, "20261205T000000.000Z-bbbbbbbb", resume=str(tmp_path / "none")).restore(
            model, optimizer)
