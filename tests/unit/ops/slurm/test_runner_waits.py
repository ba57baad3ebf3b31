"""`trainmedic slurm run` waiting for the nodes' `trainmedic node` (ops/slurm/runner.py): a node that
never comes up fails the allocation only when the job is left without enough nodes; the others wait as
spares. A fake log and fake srun steps stand in for Kafka and Slurm."""

from __future__ import annotations

import argparse
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from trainmedic.common.errors import TrainmedicError
from trainmedic.ops.slurm.allocation import Allocation
from trainmedic.ops.slurm.runner import Cancelled, wait_up
from trainmedic.schemas.commands import NodeJoined

ALLOCATION = Allocation("7", ("n1", "n2", "n3"))


@dataclass
class Step:
    returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode


@dataclass
class Record:
    event: object


@dataclass
class Watch:
    joins: list[str]
    state: object = None  # the folded log: read for daemon nodes only

    def poll(self, timeout_s: float) -> list[Record]:
        joined, self.joins = self.joins, []
        return [Record(NodeJoined(ts=1.0, node=node)) for node in joined]


def args(timeout_s: float) -> argparse.Namespace:
    return argparse.Namespace(ready_timeout_s=timeout_s, daemon_nodes=False, logs=Path("/logs"))


def test_every_node_up_is_every_node() -> None:
    steps = {n: Step() for n in ALLOCATION.nodes}
    assert wait_up(Watch(["n3", "n1", "n2"]), ALLOCATION, 2, steps, args(60), threading.Event()) == [
        "n1", "n2", "n3"]


def test_a_node_whose_step_ended_leaves_the_others_to_run_the_job(capsys) -> None:
    steps = {"n1": Step(), "n2": Step(1), "n3": Step()}
    assert wait_up(Watch(["n1", "n3"]), ALLOCATION, 2, steps, args(60), threading.Event()) == ["n1", "n3"]
    assert "n2 is not up (its step ended): the job goes on without it" in capsys.readouterr().out


def test_too_few_nodes_up_fail_the_allocation_saying_how_many() -> None:
    steps = {"n1": Step(), "n2": Step(1), "n3": Step(1)}
    with pytest.raises(TrainmedicError, match="up on 1 of the 2 nodes the job needs"):
        wait_up(Watch(["n1"]), ALLOCATION, 2, steps, args(60), threading.Event())


def test_past_the_timeout_a_silent_node_is_left_behind_if_enough_are_up() -> None:
    steps = {n: Step() for n in ALLOCATION.nodes}
    assert wait_up(Watch(["n1", "n2"]), ALLOCATION, 2, steps, args(0), threading.Event()) == ["n1", "n2"]
    with pytest.raises(TrainmedicError, match="not up within 0 s on n2, n3"):
        wait_up(Watch(["n1"]), ALLOCATION, 2, steps, args(0), threading.Event())


def test_a_cancel_is_seen_at_the_next_poll() -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        wait_up(Watch([]), ALLOCATION, 2, {n: Step() for n in ALLOCATION.nodes}, args(60), cancel)
