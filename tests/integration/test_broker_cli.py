"""`trainmedic broker start|status|stop` on a broker of this test's own (own home, own ports)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import schemas as s
from bus.admin import create_topics
from bus.consumer import EventConsumer
from bus.producer import EventProducer
from bus.settings import KafkaSettings

pytestmark = pytest.mark.kafka


def _free_pair() -> int:
    """A port p with p and p + 1 both free on loopback."""
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        with socket.socket() as other:
            try:
                other.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two adjacent free ports on loopback")


def broker(home: Path, port: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRAINMEDIC_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "trainmedic.cli", "broker", *args, "--port", str(port)],
        capture_output=True, text=True, env=env, timeout=180,
    )


def test_start_status_round_trip_stop(tmp_path: Path) -> None:
    port = _free_pair()
    started = broker(tmp_path, port, "start")
    try:
        assert started.returncode == 0, started.stderr
        assert started.stdout.strip() == f"127.0.0.1:{port}"
        assert "broker started" in started.stderr

        again = broker(tmp_path, port, "start")
        assert again.returncode == 0
        assert again.stdout.strip() == f"127.0.0.1:{port}"
        assert "already running" in again.stderr

        status = broker(tmp_path, port, "status")
        assert status.returncode == 0
        assert f"running at 127.0.0.1:{port}" in status.stdout

        settings = KafkaSettings(bootstrap=started.stdout.strip(), topic_prefix="cli.")
        create_topics(settings, partitions=1)
        beat = s.NodeHeartbeat(ts=1.0, node="n", interval=1.0)
        with EventProducer(settings) as producer:
            producer.send(settings.topics.node, beat, key="n")
        with EventConsumer(settings, [settings.topics.node], "cli-test") as consumer:
            got = []
            for _ in range(60):
                got += consumer.poll(0.5)
                if got:
                    break
        assert [r.event for r in got] == [beat]
    finally:
        stopped = broker(tmp_path, port, "stop")
    assert stopped.returncode == 0
    assert stopped.stdout.strip() == "broker stopped"
    after = broker(tmp_path, port, "status")
    assert after.returncode == 3
    assert "not running" in after.stdout
    assert broker(tmp_path, port, "stop").stdout.strip() == "broker was not running"
