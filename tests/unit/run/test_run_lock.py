"""One `trainmedic run` per home: a second is refused with who holds it and what to do; the home is
free again once the first ends, or dies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trainmedic.run.lock import RunBusy, only_run


def test_a_second_run_in_the_same_home_is_refused_and_told_what_to_do(tmp_path: Path) -> None:
    with only_run(tmp_path, "first-job"):
        with pytest.raises(RunBusy) as busy, only_run(tmp_path, "second-job"):
            pass
        assert "first-job" in str(busy.value) and "TRAINMEDIC_HOME=" in str(busy.value)
        with only_run(tmp_path / "other-home", "third-job"):  # another home is another run's
            pass
    with only_run(tmp_path, "second-job"):  # free once the first ended
        pass


def test_the_home_is_free_once_the_holder_is_killed(tmp_path: Path) -> None:
    code = ("import sys, time; from pathlib import Path; from trainmedic.run.lock import only_run\n"
            "with only_run(Path(sys.argv[1]), 'held'):\n    print('held', flush=True); time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunBusy, match=f"pid {holder.pid}"), only_run(tmp_path, "mine"):
            pass
    finally:
        holder.kill()
        holder.wait(timeout=30)
    with only_run(tmp_path, "mine"):  # the kernel let go of the dead holder's lock
        pass
