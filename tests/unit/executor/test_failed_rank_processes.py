"""Real ranks (issue 33): one that fails at import leaves its cause in its exit's tail, cold and warm;
a rank forked warm names its job and rank in its process title (ps), not the fork server's."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests.unit.executor.test_forkserver import wait_exit, warm_supervisor  # noqa: F401 (a fixture)
from trainmedic.recovery.executor.job_trees import JobTrees
from trainmedic.recovery.executor.supervisor import Supervisor
from trainmedic.schemas import WorkerSpec

CAUSE = "ModuleNotFoundError: No module named 'no_such_module'"


def test_a_cold_rank_that_fails_at_import_ends_with_its_traceback_as_tail(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('loading', flush=True)\nimport no_such_module\n")
    sup = Supervisor()
    spec = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                      ranks=(0,), world_size=1, master_addr="h", master_port=1,
                      command=(sys.executable, str(script)))
    try:
        sup.launch("j", 0, spec, [dict(os.environ)], tmp_path)
        ended = wait_exit(sup)
    finally:
        sup.stop_all(grace_s=0.1)
    tail = ended.tail
    assert ended.exit_code == 1
    assert tail.startswith("Traceback (most recent call last):") and tail.endswith(CAUSE)
    assert "loading" not in tail


def test_a_warm_rank_that_fails_at_import_ends_with_its_traceback_as_tail(warm_supervisor,  # noqa: F811
                                                                           tmp_path: Path) -> None:
    spec = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                      ranks=(0,), world_size=1, master_addr="h", master_port=1,
                      command=(sys.executable, "-m", "no_such_module"))
    warm_supervisor.launch("j", 0, spec, [dict(os.environ)], tmp_path)
    tail = wait_exit(warm_supervisor).tail
    assert tail.startswith("Traceback") and "No module named no_such_module" in tail.splitlines()[-1]


def test_a_warm_rank_shows_its_job_and_rank_in_ps(tmp_path: Path) -> None:
    # what its ranks' environ shows: the launcher's
    sup = Supervisor(trees=JobTrees(warm=True, env={**os.environ, "SERVER_MARK": "kept"}))
    try:
        title, cmdline, environ = warm_title(sup, tmp_path)
    finally:
        sup.stop_all(grace_s=0.1)
    # cut to the fork server's own command line, so that /proc/PID/environ is left as it was
    assert cmdline.startswith("trainmedic rank 3 of job llm g2: python -m") and title.startswith(cmdline)
    assert b"SERVER_MARK=kept" in environ.split(b"\0")


def warm_title(sup: Supervisor, tmp_path: Path) -> tuple[str, str, bytes]:
    spec = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                      ranks=(3,), world_size=4, master_addr="h", master_port=1,
                      command=(sys.executable, "-m", "tests.unit.executor.rank_probe", "--sleep"))
    (pid,) = sup.launch("llm", 2, spec, [dict(os.environ)], tmp_path)
    title = "trainmedic rank 3 of job llm g2: python -m tests.unit.executor.rank_probe --sleep"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode()
        if cmdline.startswith("trainmedic"):
            break
        time.sleep(0.05)
    return title, cmdline, Path(f"/proc/{pid}/environ").read_bytes()


# A rank that replaces its log, then fails (issue 42, attacks A2 and B4): a link to a secret must not
# make the executor read the secret into the exit's tail (then the incident, the alerts); a FIFO must
# not block it. The tail comes from the descriptor the executor opened, whatever the name is now.
@pytest.mark.parametrize("replaced_by", ["link", "fifo"])
@pytest.mark.parametrize("start", ["cold", "warm"])
def test_a_rank_that_replaces_its_log_cannot_make_the_executor_read_elsewhere_or_block(
        tmp_path: Path, replaced_by: str, start: str, request) -> None:
    secret = tmp_path / "secrets.json"
    secret.write_text('{"admin": "the-broker-password"}\n')
    sup = request.getfixturevalue("warm_supervisor") if start == "warm" else Supervisor()
    spec = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                      ranks=(0,), world_size=1, master_addr="h", master_port=1,
                      command=(sys.executable, "-m", "tests.unit.executor.replace_log", replaced_by,
                               str(secret)))
    job_dir = tmp_path / "jobs" / "j" / "s1"
    try:
        sup.launch("j", 0, spec, [{**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])}], job_dir)
        ended = wait_exit(sup)
    finally:
        sup.stop_all(grace_s=0.1)
    assert ended.exit_code == 1
    assert "the-broker-password" not in (ended.tail or "") and "my last words" in (ended.tail or "")
