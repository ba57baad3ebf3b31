"""Real ranks (issue 33): one that fails at import leaves its cause in its exit's tail, cold and warm;
a rank forked warm names its job and rank in its process title (ps), not the fork server's."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from tests.unit.executor.test_forkserver import wait_exit, warm_supervisor  # noqa: F401 (a fixture)
from trainmedic.recovery.executor.forkserver import WarmLauncher, become_subreaper
from trainmedic.recovery.executor.supervisor import Supervisor, failure_tail
from trainmedic.schemas import WorkerSpec

CAUSE = "ModuleNotFoundError: No module named 'no_such_module'"


def test_a_cold_rank_that_fails_at_import_ends_with_its_traceback_as_tail(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('loading', flush=True)\nimport no_such_module\n")
    sup = Supervisor()
    spec = WorkerSpec(submission="s1", ranks=(0,), world_size=1, master_addr="h", master_port=1,
                      command=(sys.executable, str(script)))
    try:
        sup.launch("j", 0, spec, [dict(os.environ)], tmp_path)
        ended = wait_exit(sup)
    finally:
        sup.stop_all(grace_s=0.1)
    tail = failure_tail(ended)
    assert ended.exit_code == 1 and ended.log == tmp_path / "logs" / "g0-rank0.log"
    assert tail.startswith("Traceback (most recent call last):") and tail.endswith(CAUSE)
    assert "loading" not in tail


def test_a_warm_rank_that_fails_at_import_ends_with_its_traceback_as_tail(warm_supervisor,  # noqa: F811
                                                                           tmp_path: Path) -> None:
    spec = WorkerSpec(submission="s1", ranks=(0,), world_size=1, master_addr="h", master_port=1,
                      command=(sys.executable, "-m", "no_such_module"))
    warm_supervisor.launch("j", 0, spec, [dict(os.environ)], tmp_path)
    tail = failure_tail(wait_exit(warm_supervisor))
    assert tail.startswith("Traceback") and "No module named no_such_module" in tail.splitlines()[-1]


def test_a_warm_rank_shows_its_job_and_rank_in_ps(tmp_path: Path) -> None:
    assert become_subreaper()
    launcher = WarmLauncher(env={**os.environ, "SERVER_MARK": "kept"})  # what its ranks' environ shows
    sup = Supervisor(launcher=launcher)
    try:
        title, cmdline, environ = warm_title(sup, tmp_path)
    finally:
        sup.stop_all(grace_s=0.1)
        launcher.close()
    # cut to the fork server's own command line, so that /proc/PID/environ is left as it was
    assert cmdline.startswith("trainmedic rank 3 of job llm g2: python -m") and title.startswith(cmdline)
    assert b"SERVER_MARK=kept" in environ.split(b"\0")


def warm_title(sup: Supervisor, tmp_path: Path) -> tuple[str, str, bytes]:
    spec = WorkerSpec(submission="s1", ranks=(3,), world_size=4, master_addr="h", master_port=1,
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
