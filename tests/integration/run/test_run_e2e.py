"""End to end: `trainmedic run` heals a user's own script and ends with its exit status.

`trainmedic run --nodes 2 --nproc-per-node 1 -- python user_train.py ...` on the real broker, with
its real services and ranks: the script (a plain torch DDP MLP, user_train.py) raises once at step
10 of generation 0, and once generation 1 steps, one of its ranks is killed with SIGKILL. Both must
be healed (a software_error and a process_exit incident, each answered by a restart), the job must
run to its last step and succeed, and `run` must exit 0 having stopped everything it started. Then
`run` tees the ranks' output; `job status` and `job logs` (all ranks, one, followed until the job's
end) read the same job back. Every rank of every generation has the variables exported in the shell
that ran `run`, one that looks like a secret too, and none of trainmedic's own settings.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers.waiting import wait_until
from tests.integration.test_demo_e2e import processes_with_home

pytestmark = pytest.mark.kafka

SCRIPT = Path(__file__).with_name("user_train.py")
STEPS = 60
STEP = re.compile(r"\] step (\d+) .*\| generation (\d+), world size (\d+)")


class Output:
    """The lines a process prints, collected as they come."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def text(self) -> str:
        return "\n".join(self.lines)

    def stepped(self, generation: int) -> bool:
        return any((m := STEP.search(line)) and int(m[2]) == generation for line in self.lines)


def rank_pid(home: Path, node: str, job: str, generation: int) -> int | None:
    """The pid of the job's rank of `generation` on `node`, from its executor's registry."""
    try:
        ranks = json.loads((home / "executor" / node / "ranks.json").read_text())
    except (FileNotFoundError, ValueError):
        return None
    return next((r["pid"] for r in ranks if r["job"] == job and r["generation"] == generation), None)


def test_a_users_script_is_healed_of_an_exception_and_a_kill_and_run_exits_0(
        kafka_bootstrap: str, deployment, tmp_path: Path) -> None:
    prefix = f"run{uuid.uuid4().hex[:8]}."
    deployment(prefix, partitions=None)  # removed after the test, with its ACLs
    job = "user-job"
    home = tmp_path / "home"
    env = {**os.environ, "TRAINMEDIC_KAFKA_BOOTSTRAP": kafka_bootstrap, "TRAINMEDIC_HOME": str(home),
           "PYTHONPATH": str(Path(__file__).resolve().parents[3]),
           "USER_SHELL_FLAG": "from-the-shell", "WANDB_API_KEY": "not-a-real-key"}  # exported, as a user does
    began = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainmedic.cli", "run", "--nodes", "2", "--nproc-per-node", "1",
         "--job-id", job, "--prefix", prefix, "--", sys.executable, str(SCRIPT), "--steps", str(STEPS),
         "--fail-at-step", "10", "--fail-flag", str(tmp_path / "failed-once"),
         "--show-env", "USER_SHELL_FLAG,WANDB_API_KEY,TRAINMEDIC_HOME,TRAINMEDIC_KAFKA_BOOTSTRAP"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = Output(proc)
    try:
        wait_until(lambda: out.stepped(1) or proc.poll() is not None, 150, "generation 1 stepping")
        assert proc.poll() is None, out.text()
        victim = wait_until(lambda: rank_pid(home, "local-1", job, 1), 10, "a rank of generation 1")
        os.kill(victim, signal.SIGKILL)
        code = proc.wait(timeout=150)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
        print(f"trainmedic run took {time.monotonic() - began:.1f} s:\n{out.text()}")  # shown when it fails
    text = out.text()
    assert "INCIDENT SEV2 software_error" in text, text
    # the ranks' own output, teed with their rank: the script's lines and the exception's traceback
    assert re.search(r"^\[rank 0\] step 5 loss \d", text, re.M), text
    assert re.search(r"^\[rank 0\] .*RuntimeError: injected failure at step 10", text, re.M), text
    assert "== generation 2: rank 1 on local-1 ==" in text, text
    assert "INCIDENT SEV2 process_exit" in text, text
    shown = re.findall(r"^\[rank \d\] rank (\d) generation (\d) env: (.*)$", text, re.M)
    every = {(rank, generation) for rank in "01" for generation in "012"}
    assert {(rank, generation) for rank, generation, _ in shown} == every, text
    assert {line for _, _, line in shown} == {
        "USER_SHELL_FLAG=from-the-shell WANDB_API_KEY=not-a-real-key TRAINMEDIC_HOME unset "
        "TRAINMEDIC_KAFKA_BOOTSTRAP unset"}, text
    assert len(re.findall(r"recovery: restart job user-job", text)) >= 2, text
    assert f"job {job}: succeeded" in text, text
    assert code == 0, text
    assert re.search(rf"job {job} succeeded: last step {STEPS - 1}, 3 generations, 2 restarts, 0 steps lost",
                     text), text
    assert (home / "run" / job / "job.yaml").exists()
    wait_until(lambda: processes_with_home(home) == [], 10, "every process run started to end")

    cli = [sys.executable, "-m", "trainmedic.cli", "job"]
    # from another directory, with no prefix exported: the run's record names it
    status = subprocess.run([*cli, "status", job], env=env, cwd=tmp_path / "home", capture_output=True,
                            text=True, timeout=60)
    assert f"(run {job}: topics {prefix}*" in status.stderr, status.stderr
    assert status.returncode == 0, status.stderr
    assert re.search(r"state\s+succeeded", status.stdout), status.stdout
    assert re.search(rf"step\s+{STEPS - 1} ", status.stdout) and re.search(r"restarts\s+2", status.stdout)
    assert re.search(r"steps lost\s+0", status.stdout), status.stdout
    unknown = subprocess.run([*cli, "status", "no-such-job"], env={**env, "TRAINMEDIC_TOPIC_PREFIX": prefix},
                             capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2, unknown.stderr
    logs = subprocess.run([*cli, "logs", job, "--rank", "0"], env=env, capture_output=True, text=True,
                          timeout=30)
    assert logs.returncode == 0 and "RuntimeError: injected failure at step 10" in logs.stdout, logs
    assert "== generation 2: rank 0 on local-0 ==" in logs.stdout
    followed = subprocess.run([*cli, "logs", job, "--follow"], env={**env, "TRAINMEDIC_TOPIC_PREFIX": prefix},
                              capture_output=True, text=True, timeout=60)  # the job ended: it ends too
    assert followed.returncode == 0 and f"job {job} ended: succeeded" in followed.stderr, followed.stderr
    assert f"[rank 1] step {STEPS - 1} " in followed.stdout
    assert "== generation 2: rank 1 on local-1 ==" in followed.stdout
    elsewhere = subprocess.run([*cli, "logs", job, "--home", str(tmp_path / "elsewhere")],
                               env={**env, "TRAINMEDIC_TOPIC_PREFIX": prefix}, capture_output=True, text=True,
                               timeout=30)
    assert elsewhere.returncode == 1 and "no logs of job user-job on this machine" in elsewhere.stderr
    unknown = subprocess.run([*cli, "logs", "no-such-job"], env={**env, "TRAINMEDIC_TOPIC_PREFIX": prefix},
                             capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and "no job 'no-such-job' in the log" in unknown.stderr, unknown.stderr
    assert not (home / "keys").exists()  # the run's keys are its own: $TRAINMEDIC_HOME/run/keys
