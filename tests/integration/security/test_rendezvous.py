"""Issue 42, D1 and D2: a job's rank-0 store, against another local user with torch's own client, the
executor root and the ranks a real rank user:

- D1: the stranger connects to the store while the job runs, lists and reads its keys and writes one;
- D2: the stranger listens at the port first; a rank that comes joins it and writes its keys there.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers.ports import free_port
from tests.helpers.waiting import wait_until
from tests.integration.executor.conftest import (  # noqa: F401 (fixtures)
    events,
    send,
    start_executor,
)
from trainmedic.recovery.executor.core.admission import AdmissionPolicy
from trainmedic.recovery.executor.job_dirs import RankUser
from trainmedic.schemas import Command, CommandAction, FailureSettings, WorkerSpec

pytestmark = pytest.mark.kafka

POLICY = AdmissionPolicy(allowed_modules=("tests.integration.security",))
STRANGER, STRANGER_GROUP = "nobody", "nogroup"  # another local user, in no group of root's
RANK = (sys.executable, "-m", "tests.integration.security.rendezvous_rank")


def launch(send, job: str, port: int, ranks: tuple[int, ...]) -> None:  # noqa: F811 (the fixture)
    worker = WorkerSpec(submission="s1", rendezvous_key=uuid.uuid4().hex * 2, ranks=ranks, world_size=2,
                        master_addr="127.0.0.1", master_port=port, command=RANK,
                        failure=FailureSettings(collective_timeout_s=8.0))
    send(Command(ts=time.time(), node="n1", id=f"start-{job}", job=job, generation=0,
                 action=CommandAction.START, worker=worker))


def stranger(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.integration.security.store_stranger", *args],
                            user=STRANGER, group=STRANGER_GROUP, extra_groups=[], stdout=subprocess.PIPE,
                            text=True)


def said(process: subprocess.Popen) -> dict:
    out, _ = process.communicate(timeout=60)
    return json.loads(out.splitlines()[-1])


def test_a_stranger_neither_reads_nor_writes_a_running_jobs_store(
        start_executor, send, events, rank_user: RankUser, jobs_dir: Path) -> None:  # noqa: F811
    executor = start_executor("n1", run_as=rank_user.name, rank_user=rank_user, jobs_dir=jobs_dir,
                              admission=POLICY)
    job, port = f"store-{uuid.uuid4().hex[:6]}", free_port()
    launch(send, job, port, (0, 1))
    logs = executor.executor.config.job_dir(job, "s1") / "logs"
    wait_until(lambda: all("joined" in _read(logs / f"g0-rank{r}.log") for r in (0, 1)), timeout_s=90,
               what="both ranks joined their process group")
    attempt = said(stranger("read", str(port)))
    assert attempt["read"] == {} and not attempt["wrote"], attempt
    for rank in (0, 1):
        ended = events.wait_for(lambda e, r=rank: e.type == "worker_exit" and e.job == job and e.rank == r,
                                timeout_s=90)
        assert ended.exit_code == 0, _read(logs / f"g0-rank{rank}.log")


def test_a_rank_never_joins_a_store_a_stranger_listens_at_first(
        start_executor, send, events, rank_user: RankUser, jobs_dir: Path) -> None:  # noqa: F811
    executor = start_executor("n1", run_as=rank_user.name, rank_user=rank_user, jobs_dir=jobs_dir,
                              admission=POLICY)
    job, port = f"squat-{uuid.uuid4().hex[:6]}", free_port()
    squatter = stranger("squat", str(port), "15")
    time.sleep(3.0)  # it listens (torch's import takes most of it)
    launch(send, job, port, (1,))  # rank 1 alone: its rank 0 is on a node that has not started yet
    ended = events.wait_for(lambda e: e.type == "worker_exit" and e.job == job, timeout_s=90)
    log = _read(executor.executor.config.job_dir(job, "s1") / "logs" / "g0-rank1.log")
    assert ended.exit_code != 0 and "proved" in log, log
    assert said(squatter)["keys"] == ["trainmedic/generation/0"]  # nothing of the job's reached it


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
