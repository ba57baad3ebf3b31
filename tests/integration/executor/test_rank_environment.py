"""A real rank started by a real executor sees none of the executor's credentials."""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers.waiting import wait_until
from trainmedic.schemas import Command, CommandAction, WorkerSpec

SECRETS = {"TRAINMEDIC_CLUSTER_KEY": "sekrit-cluster-key", "TRAINMEDIC_CLUSTER_KEY_FILE": "/sekrit/key-file",
           "TRAINMEDIC_KAFKA_CONFIG": '{"sasl.password": "sekrit-sasl"}', "DB_PASSWORD": "sekrit-db"}


def rank_environment(send, events, tmp_path: Path) -> tuple[dict, str]:
    """Start one rank of a new job on n1 that writes what it sees (`env_rank`); its findings and job."""
    seen, job = tmp_path / "seen.json", f"env-{uuid.uuid4().hex[:8]}"
    worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                        ranks=(0,), world_size=1, master_addr="127.0.0.1", master_port=1,
                        command=(sys.executable, "-m", "tests.integration.executor.env_rank", str(seen)))
    send(Command(ts=time.time(), node="n1", id=f"start-{job}", job=job, generation=0,
                 action=CommandAction.START, worker=worker))
    events.wait_for(lambda e: e.type == "worker_exit" and e.job == job, timeout_s=90)
    return json.loads(seen.read_text()), job


@pytest.mark.kafka
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_no_secret_of_the_executors_environment_reaches_a_rank(start_executor, send, events, monkeypatch,
                                                              tmp_path: Path, warm: bool) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "lo")  # what a rank does need
    start_executor("n1", warm_start=warm)
    found, job = rank_environment(send, events, tmp_path)
    for where in (json.dumps(found["environ"]), found["proc"]):
        assert not [value for value in SECRETS.values() if value in where], where
        assert not [name for name in SECRETS if f"{name}=" in where or f'"{name}"' in where]
    assert found["environ"]["TRAINMEDIC_JOB"] == job and found["environ"]["NCCL_SOCKET_IFNAME"] == "lo"


@pytest.mark.kafka
def test_a_rank_holds_no_kafka_settings_and_reports_through_its_executor_only_about_itself(
        start_executor, send, events, monkeypatch, tmp_path: Path) -> None:
    from prometheus_client import REGISTRY

    monkeypatch.delenv("TRAINMEDIC_KAFKA_CONFIG", raising=False)  # the executor's own: its role's file
    start_executor("n1")
    found, _ = rank_environment(send, events, tmp_path)
    kafka = [name for name in found["environ"] if "KAFKA" in name or name == "TRAINMEDIC_CREDENTIALS_DIR"]
    assert kafka == [] and "sasl" not in found["proc"]
    assert found["environ"]["TRAINMEDIC_REPORT_SOCKET"]

    def refused(label: str) -> float:
        return REGISTRY.get_sample_value("trainmedic_executor_rank_reports_total", {"outcome": label}) or 0.0

    before = {label: refused(label) for label in ("other_job", "other_generation")}
    job = f"hook-{uuid.uuid4().hex[:8]}"
    worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                        ranks=(0,), world_size=1, master_addr="127.0.0.1", master_port=1,
                        command=(sys.executable, "-m", "tests.integration.executor.hook_rank"))
    sent = time.time()
    send(Command(ts=sent, node="n1", id=f"start-{job}", job=job, generation=0,
                 action=CommandAction.START, worker=worker))
    error = events.wait_for(lambda e: e.type == "worker_error" and e.job == job, timeout_s=90)
    exited = events.wait_for(lambda e: e.type == "worker_exit" and e.job == job, timeout_s=30)
    assert error.error == "RuntimeError: boom in a reporting rank"
    assert error.pid == exited.pid and sent <= error.ts <= time.time()  # the executor's stamp, not the rank's
    assert [e.type for e in events.seen if getattr(e, "job", None) == job and e.type.startswith("worker_")
            and e.type != "worker_exit"] == ["worker_start", "worker_step", "worker_error"]
    # The forged lines came on a connection of their own, which the report server's thread may read
    # after the executor published the rank's exit: counted within seconds, and once.
    for label, count in before.items():
        wait_until(lambda label=label, count=count: refused(label) >= count + 1, 10, f"a {label} refusal")
        assert refused(label) == count + 1, label
    assert not [e for e in events.seen if getattr(e, "job", None) == "someone-else"
                or getattr(e, "error", None) == "forged"]
