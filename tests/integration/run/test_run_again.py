"""A job id run again (issue 41): `trainmedic run --job-id X` three times in one home, each run a new
submission on the same executors. The second asks to resume the first's checkpoint (`--resume
latest`) and trains on from it, every loss an uninterrupted run's; the third asks nothing and starts
at step 0. Before, the second run's start command had the first's id and was taken as already
applied: nothing started, and the run waited forever.
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


def run(env: dict, tmp_path: Path, steps: int, *flags: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "trainmedic.cli", "run", "--nodes", "2", "--job-id", "again", "--prefix",
         env["PREFIX"], "--checkpoint-dir", str(tmp_path / "checkpoints"), *flags, "--", sys.executable,
         "-m", "trainmedic.demo.train", "--steps", str(steps), "--step-s", "0.05", "--checkpoint-every", "5"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return done.stdout


def test_a_job_id_run_again_resumes_only_when_asked(kafka_bootstrap: str, deployment, tmp_path: Path) -> None:
    env = {**os.environ, "TRAINMEDIC_KAFKA_BOOTSTRAP": kafka_bootstrap,
           "TRAINMEDIC_HOME": str(tmp_path / "home")}
    outputs = []
    for steps, flags in ((20, ()), (30, ("--resume", "latest")), (10, ())):
        prefix = f"again{uuid.uuid4().hex[:8]}."
        deployment(prefix, partitions=None)
        outputs.append(run({**env, "PREFIX": prefix}, tmp_path, steps, *flags))
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
