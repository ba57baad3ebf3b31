"""The local broker's configuration and its refusals, without starting Java."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from trainmedic.common.errors import BrokerError
from trainmedic.local.broker import LocalBroker
from trainmedic.local.broker_config import cluster_id, server_properties


def test_server_properties_are_kraft_combined_on_loopback(tmp_path: Path) -> None:
    props = dict(
        line.split("=", 1) for line in server_properties(tmp_path / "d", 19092, 19093).splitlines()
    )
    assert props["process.roles"] == "broker,controller"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["log.dirs"] == str(tmp_path / "d")
    assert props["offsets.topic.replication.factor"] == "1"


def test_a_cluster_id_never_begins_with_a_dash() -> None:
    # 0xf8 encodes to '-' first; kafka-storage took such an id for an option and would not format
    draws = iter([b"\xf8" + bytes(15), b"\x01" * 16])
    drawn = cluster_id(lambda: next(draws))
    assert drawn == "AQEBAQEBAQEBAQEBAQEBAQ"
    assert next(draws, None) is None


def test_missing_java_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: no java, no mvn
    with pytest.raises(BrokerError, match="Java 17 or newer is needed"):
        LocalBroker(tmp_path, port=_free_port()).start()


def test_missing_maven_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BrokerError, match="Maven is needed"):
        LocalBroker(tmp_path).fetch_jars()


def test_a_taken_port_is_refused_clearly(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(BrokerError, match=f"port {port} .* taken"):
            LocalBroker(tmp_path, port=port).start()


def test_status_of_a_broker_that_never_ran(tmp_path: Path) -> None:
    broker = LocalBroker(tmp_path)
    assert broker.state() is None
    assert broker.stop() is False


def test_a_stale_state_file_is_not_a_running_broker(tmp_path: Path) -> None:
    broker = LocalBroker(tmp_path)
    broker.dir.mkdir(parents=True)
    broker.state_file.write_text('{"pid": 999999999, "port": 1, "controller_port": 2}')
    assert broker.state() is None
    assert not broker.state_file.exists()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
