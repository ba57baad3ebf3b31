"""Which ranks a restart keeps: one that reported its peer's failure is waited for (a bounded time)
until it says it waits to re-form, since a survivor under `Runtime.run` saves its snapshot and leaves
its broken group first; one that ended meanwhile is not waited for."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from trainmedic.recovery.executor.command_applier import ON_ITS_WAY_S, CommandApplier
from trainmedic.recovery.executor.core.reports import LaunchedRank
from trainmedic.schemas import Command, CommandAction, WorkerSpec


class Reporter:
    """What the applier asks the rank reporter, for ranks that reported a failure."""

    def __init__(self, pids: list[int]) -> None:
        self.failed, self.waiting = set(pids), set()
        self.launched = {pid: LaunchedRank("j", 0, rank, 2, submission="s1") for rank, pid in enumerate(pids)}

    def on_its_way(self, pid: int) -> bool:
        return pid in self.failed

    def is_waiting(self, pid: int) -> bool:
        return pid in self.waiting

    def launched_as(self, pid: int) -> LaunchedRank | None:
        return self.launched.get(pid)

    def says_it_waits(self, pid: int) -> None:
        self.failed.discard(pid)
        self.waiting.add(pid)


def restart() -> Command:
    worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32, ranks=(0, 1), world_size=2,
                        master_addr="h", master_port=29500, command=("python", "train.py"))
    return Command(ts=time.time(), node="n1", id="c1", job="j", generation=1, action=CommandAction.RESTART,
                   worker=worker)


def survivors(reporter: Reporter, pids: list[int]) -> dict[int, int]:
    applier = SimpleNamespace(_reporter=reporter,
                              _supervisor=SimpleNamespace(pids=lambda job: dict(enumerate(pids))))
    return CommandApplier._survivors(applier, restart())  # type: ignore[arg-type]


def test_a_survivor_that_says_it_waits_after_the_restart_came_is_kept() -> None:
    rank = subprocess.Popen(["sleep", "30"])
    try:
        reporter = Reporter([rank.pid])
        threading.Timer(0.3, reporter.says_it_waits, [rank.pid]).start()
        began = time.monotonic()
        assert survivors(reporter, [rank.pid]) == {rank.pid: 0}
        assert time.monotonic() - began < ON_ITS_WAY_S
    finally:
        rank.kill()
        rank.wait()


def test_a_rank_that_ended_after_its_failure_is_not_waited_for() -> None:
    rank = subprocess.Popen(["true"])
    for _ in range(500):  # until it is a zombie: ended, not reaped
        if "\nState:\tZ" in Path(f"/proc/{rank.pid}/status").read_text():
            break
        time.sleep(0.01)
    try:
        began = time.monotonic()
        assert survivors(Reporter([rank.pid]), [rank.pid]) == {}
        assert time.monotonic() - began < 0.5
    finally:
        rank.wait()
