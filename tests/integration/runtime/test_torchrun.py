"""A script that adopted the runtime still runs under plain torchrun, where no executor hands it a
rendezvous key: it joins through torch's own store and says so."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

RANK = Path(__file__).with_name("torchrun_rank.py")


def test_a_script_joins_under_torchrun_without_an_executor() -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TRAINMEDIC_", "MASTER_", "TORCHELASTIC"))}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
                           "--nproc-per-node", "2", str(RANK)], env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    sums = sorted(re.findall(r"rank \d+: sum \d+", done.stdout))  # the two ranks' lines may interleave
    assert sums == ["rank 0: sum 1", "rank 1: sum 1"]
    assert "joining through torch's own store" in done.stderr
