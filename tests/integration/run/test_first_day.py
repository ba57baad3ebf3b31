"""A user's first day, scripted (issue 33): their own project, with a `schemas/` package of its own,
run from its own directory with no TRAINMEDIC_HOME (state goes to $XDG_STATE_HOME/trainmedic).

A script broken at import must fail as torchrun fails: exit 1 within 60 s, the traceback on the
terminal. The same project's script that crashes once must be healed: exit 0, 0 steps lost.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers.waiting import wait_until
from tests.integration.run.test_run_e2e import SCRIPT, Output
from tests.integration.test_demo_e2e import processes_with_home

pytestmark = pytest.mark.kafka

BROKEN = """\
import schemas  # the project's own package, not trainmedic's

assert schemas.OURS
import tokenizer_we_forgot_to_install  # noqa: F401
"""
FAILED_WITHIN_S = 60.0


def project(root: Path) -> Path:
    """A user's repository: its own `schemas` package, a broken script and a working one that
    imports that package before it trains."""
    (root / "schemas").mkdir(parents=True)
    (root / "schemas" / "__init__.py").write_text("OURS = True\n")
    (root / "broken.py").write_text(BROKEN)
    future = "from __future__ import annotations\n"
    (root / "train.py").write_text(SCRIPT.read_text().replace(
        future, f"{future}\nimport schemas  # the project's own\n\nassert schemas.OURS\n", 1))
    return root


def run(root: Path, env: dict, prefix: str, job: str, *script: str) -> tuple[int, str, float]:
    """`trainmedic run --nodes 2` of `script` from the project's directory: exit status, output, seconds."""
    began = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainmedic.cli", "run", "--nodes", "2", "--nproc-per-node", "1",
         "--job-id", job, "--prefix", prefix, "--", sys.executable, *script],
        cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = Output(proc)
    try:
        code = proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
        print(f"trainmedic run took {time.monotonic() - began:.1f} s:\n{out.text()}")  # shown when it fails
    return code, out.text(), time.monotonic() - began


def test_a_first_day_in_a_users_own_project(kafka_bootstrap: str, deployment, tmp_path: Path) -> None:
    root = project(tmp_path / "my-project")
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if k != "TRAINMEDIC_HOME"}
    env |= {"TRAINMEDIC_KAFKA_BOOTSTRAP": kafka_bootstrap, "XDG_STATE_HOME": str(state),
            "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    home = state / "trainmedic"

    prefix = f"day{uuid.uuid4().hex[:8]}."
    deployment(prefix, partitions=None)
    code, text, took = run(root, env, prefix, "broken", "broken.py")
    assert code == 1, text
    assert took < FAILED_WITHIN_S, f"a script broken at import failed after {took:.1f} s:\n{text}"
    # the traceback, teed with its rank, and the cause in trainmedic's own line
    assert re.search(r"^\[rank \d\] Traceback \(most recent call last\):", text, re.M), text
    assert re.search(r"^\[rank \d\] ModuleNotFoundError: No module named 'tokenizer_we_forgot_to_install'",
                     text, re.M), text
    assert "never completed a step" in text, text
    assert re.search(r"job broken failed: no step, 2 generations, 1 restart, 0 steps lost", text), text
    print(f"MEASURED: a script broken at import: trainmedic run exited 1 after {took:.1f} s")
    wait_until(lambda: processes_with_home(home) == [], 10, "every process run started to end")
    status = subprocess.run([sys.executable, "-m", "trainmedic.cli", "job", "status", "broken"],
                            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    assert re.search(r"state\s+failed", status.stdout), status.stdout
    assert "No module named 'tokenizer_we_forgot_to_install'" in status.stdout, status.stdout

    prefix = f"day{uuid.uuid4().hex[:8]}."
    deployment(prefix, partitions=None)
    flag = tmp_path / "crashed-once"
    code, text, _ = run(root, env, prefix, "healed", "train.py", "--steps", "40", "--fail-at-step", "10",
                        "--fail-flag", str(flag))
    assert flag.exists(), text
    assert "INCIDENT SEV2 software_error" in text, text
    assert code == 0, text
    summary = r"job healed succeeded: last step 39, 2 generations, 1 restart, 0 steps lost"
    assert re.search(summary, text), text
    assert (home / "run" / "healed" / "job.yaml").exists() and not (root / ".trainmedic").exists()
    assert sorted(p.name for p in root.iterdir()) == ["broken.py", "schemas", "train.py"]
