"""`trainmedic broker start|status|stop` on a broker of this test's own (own home, own ports):
secure by default, plain with `--insecure`, and a plain broker's topics kept when it turns secure."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import trainmedic.schemas as s
from trainmedic.bus.admin import create_topics, list_topics
from trainmedic.bus.consumer import EventConsumer
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import KafkaError
from trainmedic.local.cluster import free_port_pair

pytestmark = pytest.mark.kafka


def broker(home: Path, port: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRAINMEDIC_HOME": str(home)}
    env.pop("TRAINMEDIC_CREDENTIALS_DIR", None)  # the session's broker's: this one writes its own
    return subprocess.run(
        [sys.executable, "-m", "trainmedic.cli", "broker", *args, "--port", str(port)],
        capture_output=True, text=True, env=env, timeout=180,
    )


def test_start_status_round_trip_stop(tmp_path: Path) -> None:
    port = free_port_pair()
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

        credentials = tmp_path / "credentials"
        assert stat.S_IMODE(credentials.stat().st_mode) == 0o700
        assert sorted(p.name for p in credentials.iterdir()) == [
            f"{role}.json" for role in sorted(("admin", "agent", "coordinator", "detector", "executor",
                                               "operator", "ops"))] + ["telemetry-master.key"]
        assert {stat.S_IMODE(p.stat().st_mode) for p in credentials.iterdir()} == {0o600}
        assert json.loads((credentials / "agent.json").read_text())["sasl.username"] == "agent"
        found = {"TRAINMEDIC_CREDENTIALS_DIR": str(credentials)}
        settings = KafkaSettings.from_env(found, role="admin", bootstrap=started.stdout.strip(),
                                          topic_prefix="cli.")
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


def plain(port: int, prefix: str = "") -> KafkaSettings:
    return KafkaSettings(bootstrap=f"127.0.0.1:{port}", topic_prefix=prefix)


def test_insecure_is_plain_and_warns_and_its_topics_survive_the_secure_start(tmp_path: Path) -> None:
    port = free_port_pair()
    (tmp_path / "credentials").mkdir()
    (tmp_path / "credentials" / "rank.json").write_text("{}")  # a stale one, from a secure run
    started = broker(tmp_path, port, "start", "--insecure")
    try:
        assert started.returncode == 0, started.stderr
        assert "INSECURE" in started.stderr
        assert "INSECURE" in (tmp_path / "broker" / "broker.log").read_text()
        assert list((tmp_path / "credentials").iterdir()) == []
        create_topics(plain(port, "old."), partitions=1)  # no credentials needed
        assert broker(tmp_path, port, "start").returncode == 1  # secure while it runs plain: stop first
    finally:
        assert broker(tmp_path, port, "stop").returncode == 0

    secure = broker(tmp_path, port, "start")  # storage without SCRAM users: they are added first
    try:
        assert secure.returncode == 0, secure.stderr
        found = {"TRAINMEDIC_CREDENTIALS_DIR": str(tmp_path / "credentials")}
        admin = KafkaSettings.from_env(found, role="admin", bootstrap=secure.stdout.strip(),
                                       topic_prefix="old.")
        assert set(admin.topics.all()) <= list_topics(admin)
        with pytest.raises(KafkaError):
            list_topics(plain(port), timeout_s=3)  # no credentials: refused
    finally:
        assert broker(tmp_path, port, "stop").returncode == 0
