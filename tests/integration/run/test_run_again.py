"""A job id run again (issue 41): `trainmedic run --job-id X` five times in one home, each run a new
submission on the same executors. The second asks to resume the first's checkpoint (`--resume
latest`) and trains on from it, every loss an uninterrupted run's; the third asks nothing and starts
at step 0. Then a user's own script (user_train.py, another model) under the same job id raises once
and is restarted: it restores its own snapshot, never the earlier runs' later ones, and its losses
equal an uninterrupted run's. Before, the second run's start command had the first's id and was
taken as already applied: nothing started, and the run waited forever.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from trainmedic.demo import mlp
from trainmedic.demo.losses import TOLERANCE

pytestmark = pytest.mark.kafka

RESTORED = re.compile(r"^\[rank 0\] restored step (\d+) from (\S+) gen 0 rank 0 ", re.M)
LOSS = re.compile(r"^\[rank 0\] step (\d+) loss (\S+) gen 0 rank 0 ", re.M)


USER_SCRIPT = Path(__file__).with_name("user_train.py")
USER_LOSS = re.compile(r"^\[rank 0\] step (\d+) loss (\S+)$", re.M)
USER_STARTS = re.compile(r"^\[rank 0\] rank 0/2 generation (\d+) starts at step (\d+) ", re.M)


def run(deployment, env: dict, tmp_path: Path, command: list[str], *flags: str) -> str:
    """`trainmedic run` of job `again` in a deployment of its own; its output (it must exit 0)."""
    prefix = f"again{uuid.uuid4().hex[:8]}."
    deployment(prefix, partitions=None)
    done = subprocess.run(
        [sys.executable, "-m", "trainmedic.cli", "run", "--nodes", "2", "--job-id", "again", "--prefix",
         prefix, "--checkpoint-dir", str(tmp_path / "checkpoints"), *flags, "--", sys.executable, *command],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return done.stdout


def demo_train(steps: int) -> list[str]:
    return ["-m", "trainmedic.demo.train", "--steps", str(steps), "--step-s", "0.05",
            "--checkpoint-every", "5"]


def test_a_job_id_run_again_resumes_only_when_asked(kafka_bootstrap: str, deployment, tmp_path: Path) -> None:
    env = {**os.environ, "TRAINMEDIC_KAFKA_BOOTSTRAP": kafka_bootstrap,
           "TRAINMEDIC_HOME": str(tmp_path / "home"), "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    outputs = [run(deployment, env, tmp_path, demo_train(steps), *flags)
               for steps, flags in ((20, ()), (30, ("--resume", "latest")), (10, ()))]
    first, resumed, fresh = outputs
    assert [RESTORED.search(text).groups() for text in outputs] == [
        ("0", "nothing"), ("20", "checkpoint"), ("0", "nothing")]
    reference = list(mlp.reference_losses(30))
    for text, steps in ((first, range(20)), (resumed, range(20, 30)), (fresh, range(10))):
        losses = {int(step): float(loss) for step, loss in LOSS.findall(text)}
        assert sorted(losses) == list(steps), text[-3000:]
        assert all(abs(losses[s] - reference[s]) <= TOLERANCE for s in steps), text[-3000:]
    submissions = list((tmp_path / "checkpoints" / "again").iterdir())
    assert len(submissions) == 3  # each run's own, named by when it was submitted

    user = [str(USER_SCRIPT), "--steps", "20", "--step-s", "0.05"]
    flag = str(tmp_path / "failed-once")
    failed = run(deployment, env, tmp_path, [*user, "--fail-at-step", "8", "--fail-flag", flag])
    uninterrupted = run(deployment, env, tmp_path, user)
    # the earlier runs left rank0-g0-step000000030.pt on the same nodes: its own step 8 is restored
    assert [tuple(map(int, m)) for m in USER_STARTS.findall(failed)] == [(0, 0), (1, 8)], failed[-3000:]
    assert dict(USER_LOSS.findall(failed)) == dict(USER_LOSS.findall(uninterrupted)), failed[-3000:]
    assert sorted(map(int, dict(USER_LOSS.findall(failed)))) == list(range(20))
