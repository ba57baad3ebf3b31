"""Real processes: the GPU producer stops cleanly on SIGTERM. (A rank that dies of an exception
still gets its worker_error out: tests/unit/executor/test_report_socket.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.integration.producers.consume import consume_until
from trainmedic.bus.settings import KafkaSettings
from trainmedic.schemas import GpuSample

pytestmark = pytest.mark.kafka


def env_for(kafka: KafkaSettings, **extra: str) -> dict[str, str]:
    return {**os.environ, "TRAINMEDIC_KAFKA_BOOTSTRAP": kafka.bootstrap,
            "TRAINMEDIC_TOPIC_PREFIX": kafka.topic_prefix, **extra}


def test_sigterm_stops_the_gpu_producer_after_a_flush(kafka: KafkaSettings, group_id: str) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "trainmedic.producers", "--source", "synthetic", "--synthetic-nodes", "n01",
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

