"""`trainmedic broker start --listen 127.0.0.1:PORT --tls` on a broker of this test's own (own home, a
port in 19500-19599): every listener is SASL_SSL, a role's credentials file (its CA beside it) produces
and consumes through confluent_kafka, a client without the CA fails the TLS handshake, one asking for
another host name fails it too (host names are verified), and a plaintext client gets nothing."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer

from tests.helpers.ports import free_pairs
from trainmedic.bus.admin import create_topics
from trainmedic.bus.settings import KafkaSettings

pytestmark = pytest.mark.kafka

PREFIX = "tls."


def broker(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRAINMEDIC_HOME": str(home), "TRAINMEDIC_TOPIC_PREFIX": PREFIX}
    env.pop("TRAINMEDIC_CREDENTIALS_DIR", None)  # the session's broker's: this one writes its own
    env.pop("TRAINMEDIC_KAFKA_BOOTSTRAP", None)
    return subprocess.run([sys.executable, "-m", "trainmedic.cli", "broker", *args],
                          capture_output=True, text=True, env=env, timeout=240)


def errors_of(config: dict[str, object], seconds: float = 8.0) -> list[str]:
    """What librdkafka reports (errors and log lines) while a client of `config` tries to reach the
    broker; raises if it gets the cluster's metadata."""
    said = _Said()
    client = Producer({**config, "error_cb": lambda err: said.append(err.str()), "logger": said})
    with pytest.raises(KafkaException):
        client.list_topics(timeout=seconds)
    client.poll(1)  # serves the callbacks
    return said


class _Said(list[str]):
    """librdkafka's log lines (a failing client repeats them many times a second), kept for the test."""

    def log(self, _level: int, fmt: str, *args: object) -> None:
        self.append(fmt % args if args else fmt)


class _Quiet:
    def log(self, *_: object) -> None:
        pass


def test_tls_broker_serves_its_roles_and_refuses_the_others(tmp_path: Path) -> None:
    (port,) = free_pairs(1, 19500, 19599)
    started = broker(tmp_path, "start", "--listen", f"127.0.0.1:{port}", "--tls")
    try:
        assert started.returncode == 0, started.stderr
        bootstrap = started.stdout.strip()
        assert bootstrap == f"127.0.0.1:{port}"
        status = broker(tmp_path, "status")
        assert f"running at {bootstrap} (secure, TLS" in status.stdout

        folder = tmp_path / "credentials"
        ca = folder / "ca.pem"
        assert ca.read_bytes() == (tmp_path / "broker" / "tls" / "ca.pem").read_bytes()
        env = {"TRAINMEDIC_CREDENTIALS_DIR": str(folder)}
        agent = KafkaSettings.from_env(env, role="agent")
        operator = KafkaSettings.from_env(env, role="operator")
        assert agent.bootstrap == bootstrap and agent.extra["security.protocol"] == "SASL_SSL"
        assert agent.extra["ssl.ca.location"] == str(ca)

        # the controller listener speaks TLS too, with the same certificate for its address
        context = ssl.create_default_context(cafile=str(ca))
        with socket.create_connection(("127.0.0.1", port + 1), timeout=10) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")

        create_topics(KafkaSettings.from_env(env, role="admin", topic_prefix=PREFIX), partitions=1)
        topic = f"{PREFIX}telemetry.node"
        value = uuid.uuid4().bytes
        producer = Producer(agent.client_config(**{"logger": _Quiet()}))
        delivered: list[object] = []
        producer.produce(topic, value, key=b"n", on_delivery=lambda err, _: delivered.append(err))
        assert producer.flush(60) == 0 and delivered == [None]
        consumer = Consumer(operator.client_config(**{
            "group.id": f"{PREFIX}read-tls-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
            "logger": _Quiet()}))
        consumer.subscribe([topic])
        got = []
        try:
            deadline = time.monotonic() + 60
            while not got and time.monotonic() < deadline:
                record = consumer.poll(0.5)
                if record is not None and record.error() is None:
                    got.append(record.value())
        finally:
            consumer.close()
        assert got == [value]

        trusted = agent.client_config()
        untrusting = {k: v for k, v in trusted.items() if k != "ssl.ca.location"}
        assert any("certificate verify failed" in e for e in errors_of(untrusting))
        misnamed = {**trusted, "bootstrap.servers": f"localhost:{port}"}  # the certificate names 127.0.0.1
        assert any("SSL handshake failed" in e for e in errors_of(misnamed))
        plain = errors_of({"bootstrap.servers": bootstrap}, seconds=4)  # no metadata: it raised
        assert any("Disconnected" in e for e in plain)  # no TLS, no SASL: the broker hangs up on it
    finally:
        stopped = broker(tmp_path, "stop")
    assert stopped.stdout.strip() == "broker stopped"
    assert broker(tmp_path, "status").returncode == 3
