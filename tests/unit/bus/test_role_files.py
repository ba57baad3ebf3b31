"""A role file carries where the broker is and, for a TLS broker, the CA beside it: `ca.pem` named
relative to the folder, so the folder works copied to another host; the file's bootstrap is used unless
TRAINMEDIC_KAFKA_BOOTSTRAP or an override gives one, and it never stays among the librdkafka extras."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from trainmedic.bus.addresses import all_loopback, host_port, is_loopback, split_host_port
from trainmedic.bus.credentials import CA_FILE, clear, read_role, write_roles
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import ConfigError
from trainmedic.local.broker_auth import client_properties, role_config


def test_a_tls_role_file_names_the_broker_and_its_ca_beside_it(tmp_path: Path) -> None:
    folder = tmp_path / "credentials"
    config = role_config("agent", "pw", bootstrap="node1.example:9092", ca=CA_FILE)
    assert config == {"bootstrap.servers": "node1.example:9092", "security.protocol": "SASL_SSL",
                      "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "agent", "sasl.password": "pw",
                      "ssl.ca.location": "ca.pem", "ssl.endpoint.identification.algorithm": "https"}
    write_roles(folder, {"agent": config}, b"-----BEGIN CERTIFICATE-----\n")
    assert json.loads((folder / "agent.json").read_text())["ssl.ca.location"] == "ca.pem"  # relative
    copied = tmp_path / "elsewhere" / "creds"
    shutil.copytree(folder, copied)
    settings = KafkaSettings.from_env({"TRAINMEDIC_CREDENTIALS_DIR": str(copied)}, role="agent")
    assert settings.bootstrap == "node1.example:9092"
    assert "bootstrap.servers" not in settings.extra  # it would override the bootstrap there
    assert settings.extra["ssl.ca.location"] == str(copied.resolve() / "ca.pem")
    assert settings.client_config()["bootstrap.servers"] == "node1.example:9092"
    assert read_role(copied, "agent")["ssl.ca.location"] == str(copied.resolve() / "ca.pem")


def test_the_environment_and_overrides_win_over_the_role_files_bootstrap(tmp_path: Path) -> None:
    write_roles(tmp_path, {"agent": role_config("agent", "pw", bootstrap="127.0.0.1:19500")})
    env = {"TRAINMEDIC_CREDENTIALS_DIR": str(tmp_path)}
    assert KafkaSettings.from_env(env, role="agent").bootstrap == "127.0.0.1:19500"
    envd = {**env, "TRAINMEDIC_KAFKA_BOOTSTRAP": "10.0.0.5:9092"}
    assert KafkaSettings.from_env(envd, role="agent").bootstrap == "10.0.0.5:9092"
    assert KafkaSettings.from_env(envd, role="agent", bootstrap="10.0.0.6:9092").client_config()[
        "bootstrap.servers"] == "10.0.0.6:9092"
    assert KafkaSettings.from_env({}, role="agent").bootstrap == "127.0.0.1:9092"  # no file: the default
    external = {"TRAINMEDIC_KAFKA_CONFIG": '{"bootstrap.servers": "10.0.0.7:9092", "ssl.ca.location": "x"}'}
    own = KafkaSettings.from_env(external)
    assert own.bootstrap == "10.0.0.7:9092" and own.extra == {"ssl.ca.location": "x"}  # not resolved


def test_a_plain_brokers_files_carry_no_ca_and_a_ca_left_behind_is_removed(tmp_path: Path) -> None:
    write_roles(tmp_path, {"agent": role_config("agent", "pw", ca=CA_FILE)}, b"ca")
    assert (tmp_path / CA_FILE).exists()
    write_roles(tmp_path, {"agent": role_config("agent", "pw")})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.json"]
    assert "ssl.ca.location" not in read_role(tmp_path, "agent")
    write_roles(tmp_path, {"agent": role_config("agent", "pw", ca=CA_FILE)}, b"ca")
    clear(tmp_path)  # --insecure
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "agent.json").write_text('{"ssl.ca.location": "probe"}')  # librdkafka's own search
    assert read_role(tmp_path, "agent") == {"ssl.ca.location": "probe"}


def test_kafkas_own_tools_trust_the_ca_as_pem(tmp_path: Path) -> None:
    props = client_properties("pw", tmp_path / "ca.pem")
    assert "security.protocol=SASL_SSL\n" in props and "ssl.truststore.type=PEM\n" in props
    assert f"ssl.truststore.location={tmp_path / 'ca.pem'}\n" in props
    assert "security.protocol=SASL_PLAINTEXT\n" in client_properties("pw")


def test_addresses() -> None:
    assert split_host_port("[::1]:9092") == ("::1", 9092) and host_port("::1", 9092) == "[::1]:9092"
    assert split_host_port("node1.example:9092") == ("node1.example", 9092)
    for wrong in ("node1", ":9092", "h:0", "h:x", "h:70000"):
        with pytest.raises(ConfigError, match="is not HOST:PORT"):
            split_host_port(wrong)
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.8.9.1", "::1", "localhost", "LOCALHOST"))
    assert not any(is_loopback(h) for h in ("192.0.2.2", "0.0.0.0", "fd00::2", "node1.example"))
    assert all_loopback("127.0.0.1:9092,localhost:9093") and not all_loopback("127.0.0.1:9092,10.0.0.5:9092")
