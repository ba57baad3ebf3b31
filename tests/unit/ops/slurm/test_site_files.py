"""The files a daemon site installs (`trainmedic slurm site-files`): a systemd unit systemd accepts, and
a prolog and epilog that, run as Slurm runs them, give the node to a job and take it back."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainmedic.ops.slurm import site_files


def run(script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", script], env={"PATH": os.environ["PATH"], **env}, capture_output=True,
                          text=True, timeout=10)


def test_the_prolog_names_the_owner_and_only_its_own_epilog_takes_the_node_back(tmp_path: Path) -> None:
    owner = f"{tmp_path}/it's here/{{node}}/slurm-job"  # a quote and a space: one shell word all the same
    prolog, epilog = site_files.prolog(owner), site_files.epilog(owner)
    node = {"SLURMD_NODENAME": "n1"}
    path = tmp_path / "it's here" / "n1" / "slurm-job"
    assert run(prolog, {**node, "SLURM_JOB_ID": "42", "SLURM_JOB_USER": "alice"}).returncode == 0
    assert path.read_text() == "42 alice\n" and path.stat().st_mode & 0o777 == 0o644
    assert run(epilog, {**node, "SLURM_JOB_ID": "41"}).returncode == 0
    assert path.exists()  # another job's end: the node stays 42's
    assert run(epilog, {**node, "SLURM_JOB_ID": "42"}).returncode == 0
    assert not path.exists()
    refused = run(prolog, {**node, "SLURM_JOB_ID": "4;2"})
    assert refused.returncode == 1 and "no SLURM_JOB_ID" in refused.stderr and not path.exists()
    path.parent.chmod(0o777)  # a folder anyone may write: a user could swap the owner file in
    refused = run(prolog, {**node, "SLURM_JOB_ID": "43"})
    assert refused.returncode == 1 and "only root may write" in refused.stderr and not path.exists()


def test_the_unit_leaves_the_ranks_to_trainmedic_node_and_systemd_accepts_it(tmp_path: Path) -> None:
    argv = ["--source", "synthetic", "--x", "5%$HOME"]  # systemd would read % and $ as its own
    text = site_files.unit([sys.executable, "-m", "trainmedic.cli"], argv)
    assert "KillMode=process" in text and "Restart=on-failure" in text
    assert "--slurm-owner-file /run/trainmedic/slurm-job --source synthetic --x '5%%$$HOME'" in text
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed here: the unit's syntax is not checked")
    unit = tmp_path / "trainmedic-node.service"
    unit.write_text(text)
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
