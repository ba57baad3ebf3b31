"""Survivors keep their processes (issue 34): under `rt.run`, when one rank of a job is killed with
SIGKILL, the other lives on: its collective breaks, it waits for the next generation, its executor
keeps it (no stop, no new process) and starts only the dead rank. The survivor's pid is the same
across the recovery, no step is lost, and every step's loss equals an uninterrupted run's: with
DDP and with FSDP2.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.helpers.waiting import wait_until
from tests.integration.run.test_run_e2e import SCRIPT, STEP, Output, rank_pid

pytestmark = pytest.mark.kafka

STEPS = 40
STARTS = re.compile(r"^\[rank (\d)\] rank \d/2 generation (\d+) starts at step (\d+) in pid (\d+)$", re.M)
LOSS = re.compile(r"^\[rank 0\] step (\d+) loss ([0-9.]+)$", re.M)


def run(tmp_path: Path, env: dict, job: str, kill_at: int | None, *flags: str) -> str:
    """`trainmedic run` of the script under `rt.run`, 2 nodes x 1 rank; with `kill_at`, the rank on
    local-1 killed with SIGKILL once the job passed that step. Its output; it must exit 0."""
    home = Path(env["TRAINMEDIC_HOME"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainmedic.cli", "run", "--nodes", "2", "--nproc-per-node", "1",
         "--job-id", job, "--prefix", env["PREFIX"], "--", sys.executable, str(SCRIPT), "--steps", str(STEPS),
         "--in-process", *flags],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = Output(proc)
    try:
        if kill_at is not None:
            wait_until(lambda: any((m := STEP.search(line)) and int(m[1]) >= kill_at for line in out.lines)
                       or proc.poll() is not None, 150, f"step {kill_at}")
            assert proc.poll() is None, out.text()
            os.kill(wait_until(lambda: rank_pid(home, "local-1", job, 0), 10, "rank 1's pid"), signal.SIGKILL)
        code = proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
        print(out.text())  # shown when it fails
    assert code == 0, out.text()
    return out.text()


def losses(text: str) -> dict[int, str]:
    """Rank 0's loss at each step (a step run again after the recovery: its last)."""
    return {int(step): loss for step, loss in LOSS.findall(text)}


@pytest.mark.parametrize("flags", [(), ("--fsdp",)], ids=["ddp", "fsdp2"])
def test_a_survivor_keeps_its_process_and_the_run_equals_an_uninterrupted_one(
        kafka_bootstrap: str, deployment, tmp_path: Path, flags: tuple[str, ...]) -> None:
    base = {**os.environ, "TRAINMEDIC_KAFKA_BOOTSTRAP": kafka_bootstrap,
            "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    texts = []
    for name, kill_at in (("killed", 10), ("uninterrupted", None)):
        prefix = f"inp{uuid.uuid4().hex[:8]}."
        deployment(prefix, partitions=None)
        env = {**base, "TRAINMEDIC_HOME": str(tmp_path / name), "PREFIX": prefix}
        texts.append(run(tmp_path, env, name, kill_at, *flags))
    killed, uninterrupted = texts
    starts = {(int(rank), int(gen)): int(pid) for rank, gen, _, pid in STARTS.findall(killed)}
    assert sorted(starts) == [(0, 0), (0, 1), (1, 0), (1, 1)], killed
    assert starts[0, 0] == starts[0, 1], "the survivor was started again"
    assert starts[1, 0] != starts[1, 1]
    assert "INCIDENT SEV2 process_exit" in killed and "recovered from process_exit by phase:" in killed
    # A sharded step needs every rank's shard of it: one the killed rank never saved is run again
    # (a step at most, its loss the same); DDP restores any rank's whole state, losing none.
    lost = "[01] steps?" if flags else "0 steps"
    assert re.search(rf"job killed succeeded: last step {STEPS - 1}, 2 generations, 1 restart, {lost} lost",
                     killed), killed
    assert losses(killed) == losses(uninterrupted) and sorted(losses(killed)) == list(range(STEPS))
