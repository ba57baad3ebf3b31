"""A rank that fails says why in its worker_exit (issue 33): its last output from its traceback on,
cold and warm; a rank the executor stops on a command carries none."""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.integration.executor.test_job_settings import REPO, start
from trainmedic.schemas import Command, CommandAction, WorkerSpec


@pytest.mark.kafka
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_rank_that_fails_at_import_reports_its_traceback_in_its_exit(start_executor, send, events,
                                                                        monkeypatch, warm: bool) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))
    start_executor("n1", warm_start=warm)
    job = f"typo-{uuid.uuid4().hex[:8]}"
    worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                        ranks=(0,), world_size=1, master_addr="127.0.0.1", master_port=1,
                        command=(sys.executable, "-m", "tests.integration.executor.import_failing_rank"))
    start(send, job, worker)
    ended = events.wait_for(lambda e: e.type == "worker_exit" and e.job == job, timeout_s=90)
    assert (ended.exit_code, ended.stopped) == (1, False)
    lines = ended.output_tail.splitlines()
    assert lines[0] == "Traceback (most recent call last):" and "loading the model" not in ended.output_tail
    assert lines[-1] == "ModuleNotFoundError: No module named 'no_such_module'"


@pytest.mark.kafka
def test_a_rank_stopped_on_a_command_carries_no_tail(start_executor, send, events, tmp_path: Path) -> None:
    start_executor("n1")
    started = tmp_path / "started"
    worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                        ranks=(0,), world_size=1, master_addr="127.0.0.1", master_port=1,
                        command=("sh", "-c", f"echo Traceback: not a failure; touch {started}; sleep 60"))
    start(send, "stopped", worker)
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    send(Command(ts=time.time(), node="n1", id="stop-it", job="stopped", generation=0,
                 action=CommandAction.STOP))
    ended = events.wait_for(lambda e: e.type == "worker_exit" and e.job == "stopped")
    assert ended.stopped and ended.signal is not None and ended.output_tail is None
