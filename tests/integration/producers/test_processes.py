"""Real processes: the GPU producer stops cleanly on SIGTERM, and a rank that dies of an
exception still gets its worker_error out (the hook flushes at interpreter exit)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from bus.settings import KafkaSettings
from schemas import GpuSample, WorkerFailed, WorkerStarted
from tests.integration.producers.consume import consume_until

pytestmark = pytest.mark.kafka


def env_for(kafka: KafkaSettings, **extra: str) -> dict[str, str]:
    return {**os.environ, "TRAINMEDIC_KAFKA_BOOTSTRAP": kafka.bootstrap,
            "TRAINMEDIC_TOPIC_PREFIX": kafka.topic_prefix, **extra}


def test_sigterm_stops_the_gpu_producer_after_a_flush(kafka: KafkaSettings, group_id: str) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "producers", "--source", "synthetic", "--synthetic-nodes", "n01",
         "--gpus-per-node", "2", "--interval-s", "0.05"],
        env=env_for(kafka), stderr=subprocess.PIPE, text=True,
    )
    try:
        records = consume_until(kafka, kafka.topics.gpu, group_id, lambda rs: len(rs) >= 4)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert "SIGTERM: stopping" in stderr
    assert "0 dropped in all (producer_drops)" in stderr
    assert all(isinstance(r.event, GpuSample) for r in records)


def test_a_rank_that_dies_of_an_exception_still_reports_it(kafka: KafkaSettings, group_id: str) -> None:
    script = textwrap.dedent("""
        from producers.hook import Hook
        hook = Hook.from_env()
        hook.started()
        with hook.capture():
            raise MemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    """)
    env = env_for(kafka, TRAINMEDIC_JOB="dies", RANK="2", WORLD_SIZE="4", TRAINMEDIC_NODE="n03")
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1 and "MemoryError" in result.stderr
    records = consume_until(kafka, kafka.topics.worker, group_id, lambda rs: len(rs) >= 2)
    assert [type(r.event) for r in records] == [WorkerStarted, WorkerFailed]
    assert records[1].event.error == "MemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert (records[1].event.rank, records[1].event.node) == (2, "n03")
