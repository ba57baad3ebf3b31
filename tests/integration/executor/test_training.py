"""Real gloo ranks under a real executor: start, kill -9, replica restart, reattempt, stop.

One scenario in one test, because each start of two torch ranks costs seconds on 2 cores.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.waiting import wait_until
from trainmedic.schemas import AckStatus, Command, CommandAction, RestoreSource, WorkerSpec

from .conftest import processes_of

STEP = re.compile(r"^step (\d+) loss \S+ gen (\d+) rank (\d+) t ([\d.]+)$", re.M)
NO_RESTORE = RestoreSource()
RESTORED = re.compile(r"^restored step (\d+) from (\w+) gen (\d+) rank (\d+) t ([\d.]+)$", re.M)


def steps_in(log: Path) -> list[tuple[int, float]]:
    """(step, unix time) of every step line a rank printed."""
    text = log.read_text() if log.exists() else ""
    return [(int(m.group(1)), float(m.group(4))) for m in STEP.finditer(text)]


@pytest.mark.kafka
def test_kill_restart_from_replica_reattempt_and_stop(start_executor, send, events, free_port, tmp_path):
    job = f"demo-{os.getpid()}-{free_port}"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ex = start_executor("n1").executor
    logs = ex.config.job_dir(job, "s1") / "logs"
    argv = (sys.executable, "-m", "trainmedic.demo.train", "--steps", "100000", "--step-s", "0.05",
            "--timeout-s", "20")

    def command(id_: str, action: CommandAction, generation: int, restore=NO_RESTORE) -> Command:
        worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                            ranks=(0, 1), world_size=2, master_addr="127.0.0.1", master_port=free_port,
                            command=argv, restore=restore)
        return Command(ts=time.time(), node="n1", id=id_, job=job, generation=generation,
                       action=action, worker=worker)

    def ack(cid: str, status: str):
        return events.wait_for(lambda e: e.type == "ack" and e.command_id == cid and e.status == status)

    # start generation 0: two gloo ranks step
    send(command("start-0", CommandAction.START, 0))
    ack("start-0", AckStatus.DONE)
    wait_until(lambda: len(steps_in(logs / "g0-rank1.log")) >= 5, what="5 steps in generation 0")

    # kill -9 rank 1: its exit is reported with signal 9; rank 0 then fails on the broken group
    os.kill(ex.supervisor.pids(job)[1], signal.SIGKILL)
    killed = events.wait_for(lambda e: e.type == "worker_exit" and e.job == job and e.rank == 1)
    assert (killed.signal, killed.exit_code, killed.generation, killed.node, killed.stopped) == (
        9, None, 0, "n1", False)
    events.wait_for(lambda e: e.type == "worker_exit" and e.job == job and e.rank == 0)
    reached = max(step for rank in (0, 1) for step, _ in steps_in(logs / f"g0-rank{rank}.log")) + 1

    # restart at generation 1 from the replica on n1: no completed step is lost
    replica = RestoreSource(kind="replica", rank=0, node="n1")
    restart = send(command("restart-1", CommandAction.RESTART, 1, replica))
    accepted, done = ack("restart-1", AckStatus.ACCEPTED), ack("restart-1", AckStatus.DONE)
    first = wait_until(lambda: steps_in(logs / "g1-rank0.log")[:1], what="a step in generation 1")
    restored = [RESTORED.search((logs / f"g1-rank{r}.log").read_text()) for r in (0, 1)]
    assert [int(m.group(1)) for m in restored] == [reached, reached]
    assert {m.group(2) for m in restored} == {"replica"}
    assert first[0][0] == reached
    print(f"\nrestart command -> accepted {accepted.ts - restart.ts:.2f}s, ranks launched "
          f"{done.ts - restart.ts:.2f}s, restored {float(restored[0].group(5)) - restart.ts:.2f}s, "
          f"first step {first[0][1] - restart.ts:.2f}s; resumed at step {reached}, steps lost: 0")

    # an old generation is fenced off
    send(command("late-stop-0", CommandAction.STOP, 0))
    assert "fenced" in ack("late-stop-0", AckStatus.REFUSED).reason

    # reattempt: every rank re-syncs and re-runs its step without a process restart
    pids = ex.supervisor.pids(job)
    send(command("reattempt-1", CommandAction.REATTEMPT, 1))
    ack("reattempt-1", AckStatus.DONE)
    wait_until(lambda: all("reattempt: re-synced" in (logs / f"g1-rank{r}.log").read_text() for r in (0, 1)),
               what="both ranks to reattempt")
    assert ex.supervisor.pids(job) == pids

    # stop: graceful, reported, and nothing of the job is left
    send(command("stop-1", CommandAction.STOP, 1))
    ack("stop-1", AckStatus.DONE)
    stopped = [events.wait_for(lambda e, r=r: e.type == "worker_exit" and e.generation == 1 and e.rank == r)
               for r in (0, 1)]
    assert {(e.signal, e.stopped) for e in stopped} == {(signal.SIGTERM, True)}  # planned: not a fault
    assert processes_of(job) == []
