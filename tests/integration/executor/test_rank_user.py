"""A real executor told to run ranks as another user (run_as): each rank, cold or forked warm, is that
user, keeps its files outside TRAINMEDIC_HOME, and cannot read the control plane's secrets."""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainmedic.bus.settings import credentials_dir, home
from trainmedic.recovery import keyring
from trainmedic.recovery.executor.job_dirs import RankUser
from trainmedic.schemas import Command, CommandAction, WorkerSpec


@pytest.fixture
def node_key_file() -> Iterator[Path]:
    """A node's private key as `trainmedic keys generate --node` writes it, in a folder others may pass."""
    with tempfile.TemporaryDirectory() as where:
        os.chmod(where, 0o755)
        keys = Path(where) / "keys"
        key_id = keyring.generate_key(keys, time.time(), keyring.node_role("n1"))
        yield keys / f"{key_id}.key"


@pytest.mark.kafka
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_rank_runs_as_the_run_as_user_and_cannot_read_the_control_planes_files(
        start_executor, send, events, rank_user: RankUser, jobs_dir: Path, node_key_file: Path,
        warm: bool) -> None:
    secrets = credentials_dir().parent / "broker" / "secrets.json"
    protected = [credentials_dir(), secrets, node_key_file, Path(f"/proc/{os.getpid()}/environ")]
    assert all(path.exists() for path in protected[:3]), protected  # the secure local broker's, and a key
    executor = start_executor("n1", warm_start=warm, run_as=rank_user.name, rank_user=rank_user,
                              jobs_dir=jobs_dir)
    config, job = executor.executor.config, f"user-{uuid.uuid4().hex[:8]}"
    worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                        ranks=(0,), world_size=1, master_addr="127.0.0.1", master_port=1,
                        command=(sys.executable, "-m", "tests.integration.executor.user_probe",
                                 *map(str, protected)))
    send(Command(ts=time.time(), node="n1", id=f"start-{job}", job=job, generation=0,
                 action=CommandAction.START, worker=worker))
    ended = events.wait_for(lambda e: e.type == "worker_exit" and e.job == job, timeout_s=90)
    output = (config.job_dir(job, "s1") / "logs" / "g0-rank0.log").read_text()
    assert ended.exit_code == 0, output
    found = json.loads(output.splitlines()[-1])
    assert found["reads"] == {str(path): "PermissionError" for path in protected}  # as root: "read"
    assert found["warm"] is warm
    assert (found["uid"], found["gid"]) == (rank_user.uid, rank_user.gid)
    assert set(found["groups"]) <= {rank_user.gid}  # none of the executor's groups
    job_dir = config.job_dir(job, "s1")
    assert (found["home"], found["snapshots"]) == (str(job_dir), str(job_dir / "snapshots"))
    assert not job_dir.is_relative_to(home()) and not job_dir.is_relative_to(credentials_dir().parent)
    owner = job_dir.stat()
    assert (owner.st_uid, stat.S_IMODE(owner.st_mode)) == (rank_user.uid, 0o700)
