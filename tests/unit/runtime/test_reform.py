"""Keeping a rank's process across a restart: the executor names the next generation in a file, the
rank waits for a newer one than its own; a broken collective tells a peer's failure from its own."""

from __future__ import annotations

import json

import pytest
import torch.distributed as dist

from trainmedic.recovery.executor.job_dirs import put
from trainmedic.runtime import reform
from trainmedic.runtime.env import WorkerEnv
from trainmedic.runtime.rank import peer_failed
from trainmedic.schemas import RestoreSource


def contract(generation: int, rank: int = 1) -> WorkerEnv:
    return WorkerEnv(master_addr="127.0.0.1", master_port=29500, rank=rank, world_size=2, local_rank=0,
                     local_world_size=1, job="llm", node="n1", generation=generation,
                     restore=RestoreSource(kind="replica"))


def named(job_dir, env: WorkerEnv) -> None:
    """What the executor writes for a rank it keeps."""
    put(job_dir, reform.REFORM_DIR, reform.file_name(env.rank), json.dumps(env.to_env()))


def test_the_executor_never_writes_through_a_link_the_rank_made(tmp_path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    job = tmp_path / "job"
    job.mkdir()
    (job / reform.REFORM_DIR).symlink_to(elsewhere)
    with pytest.raises(OSError):
        named(job, contract(3))
    (job / reform.REFORM_DIR).unlink()
    (job / reform.REFORM_DIR).mkdir()
    (job / reform.REFORM_DIR / reform.file_name(1)).symlink_to(elsewhere / "target")
    named(job, contract(3))  # the link itself is replaced, its target never written
    assert list(elsewhere.iterdir()) == [] and not reform.reform_path(job, 1).is_symlink()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_rank_takes_the_next_generation_its_executor_names(tmp_path) -> None:
    named(tmp_path, contract(3))
    clock = Clock()
    assert reform.wait(tmp_path, 1, after=2, timeout_s=5.0, clock=clock, sleep=clock.sleep) == contract(3)
    assert clock.now == 0.0


def test_an_older_or_partial_file_is_waited_past_until_the_deadline(tmp_path) -> None:
    named(tmp_path, contract(2))  # the generation the rank is at: not a next one
    clock = Clock()
    assert reform.wait(tmp_path, 1, after=2, timeout_s=1.0, clock=clock, sleep=clock.sleep) is None
    assert clock.now >= 1.0
    reform.reform_path(tmp_path, 1).write_text('{"MASTER_ADDR": "127.0.0.1"')  # cut short
    assert reform.wait(tmp_path, 1, after=2, timeout_s=0.2, clock=clock, sleep=clock.sleep) is None
    reform.reform_path(tmp_path, 1).write_text(json.dumps({"RANK": "1"}))  # not a contract
    assert reform.wait(tmp_path, 1, after=2, timeout_s=0.2, clock=clock, sleep=clock.sleep) is None


def test_each_rank_has_its_own_file(tmp_path) -> None:
    named(tmp_path, contract(3, rank=0))
    clock = Clock()
    assert reform.wait(tmp_path, 1, after=2, timeout_s=0.2, clock=clock, sleep=clock.sleep) is None


@pytest.mark.parametrize("err", [
    RuntimeError("[gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:1"),
    RuntimeError("[gloo/transport/tcp/pair.cc:545] Read error [127.0.0.1]:2: Connection reset by peer"),
    dist.DistBackendError("NCCL communicator was aborted on rank 1"),
])
def test_a_collective_broken_by_a_peer_is_a_peers_failure(err) -> None:
    assert peer_failed(err)


@pytest.mark.parametrize("err", [RuntimeError("injected failure at step 10"), ValueError("bad batch"),
                                 KeyError("Connection closed by peer")])
def test_the_ranks_own_error_is_not(err) -> None:
    assert not peer_failed(err)


def test_a_kept_error_holds_nothing_of_the_frames_it_passed_through() -> None:
    """The hook keeps the last error it reported; the broken process group its frames held must go,
    or the group's connections stay open and the ranks still blocked in it never learn."""
    import gc
    import weakref

    from trainmedic.runtime.rank import forget_frames

    class Group:
        pass

    def collective(group: Group) -> None:
        raise RuntimeError("Connection closed by peer")

    def step() -> weakref.ref:
        group = Group()
        held = weakref.ref(group)
        try:
            try:
                collective(group)
            except RuntimeError as err:
                raise ValueError("while stepping") from err
        except ValueError as err:
            kept.append(err)
        return held

    kept: list[BaseException] = []
    held = step()
    gc.collect()
    assert held() is not None  # the kept error's frames hold the group
    forget_frames(kept[0])
    gc.collect()
    assert held() is None and str(kept[0]) == "while stepping"
