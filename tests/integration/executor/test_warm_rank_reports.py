"""A rank forked by the warm launcher reports what its in-band hook queued, however it ends.

The fork server ends a rank with `os._exit`, which skips atexit, where the hook flushes: a warm
rank's worker_error never reached Kafka, so its crash was blamed on its node (issue 17). The
hook reports to its executor's socket; here a ReportServer stands in for the executor around it.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainmedic.recovery.executor.core.reports import LaunchedRank
from trainmedic.recovery.executor.job_trees import JobTrees
from trainmedic.recovery.executor.report_server import ReportServer
from trainmedic.recovery.executor.report_sockets import socket_folder
from trainmedic.recovery.executor.supervisor import Supervisor
from trainmedic.schemas import WorkerSpec


@pytest.fixture
def warm() -> Iterator[Supervisor]:
    sup = Supervisor(trees=JobTrees(warm=True))
    yield sup
    sup.stop_all(grace_s=0.1)


def exit_of(sup: Supervisor, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if exits := sup.reap():
            return exits[0]
        time.sleep(0.02)
    raise AssertionError("the rank did not end")


@pytest.fixture
def reports(tmp_path: Path) -> Iterator[tuple[ReportServer, dict[int, LaunchedRank], list]]:
    launched: dict[int, LaunchedRank] = {}
    published: list = []
    server = ReportServer(socket_folder(tmp_path), node="n1", resolve=launched.get, publish=published.append)
    server.start()
    yield server, launched, published
    server.close()


@pytest.mark.parametrize(("end", "code", "expected"), [
    ("raise", 1, ("worker_error", "RuntimeError: boom in a warm rank")),
    ("exit", 3, ("worker_error", "ValueError: bad batch in a warm rank")),
    ("return", 0, ("worker_step", None)),
])
def test_a_warm_rank_reports_its_last_events_however_it_ends(
        warm: Supervisor, reports, tmp_path: Path, end: str, code: int, expected) -> None:
    server, launched, published = reports
    job = f"warm-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PROBE_END": end, "TRAINMEDIC_JOB": job, "TRAINMEDIC_NODE": "n1",
           "RANK": "0", "WORLD_SIZE": "1", "TRAINMEDIC_REPORT_SOCKET": str(server.listen(job))}
    spec = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                      ranks=(0,), world_size=1, master_addr="h", master_port=1,
                      command=(sys.executable, "-m", "tests.integration.executor.reporting_rank"))
    pid = warm.launch(job, 0, spec, [env], tmp_path)[0]
    launched[pid] = LaunchedRank(job, 0, 0, 1, 0)
    ended = exit_of(warm)
    assert (ended.pid, ended.exit_code) == (pid, code), (tmp_path / "logs" / "g0-rank0.log").read_text()
    kind, error = expected
    deadline = time.monotonic() + 20
    while not [e for e in published if e.type == kind] and time.monotonic() < deadline:
        time.sleep(0.05)
    found = [e for e in published if e.type == kind]
    assert found, published
    assert getattr(found[-1], "error", None) == error
    assert found[-1].pid == pid  # reported by the forked rank itself
