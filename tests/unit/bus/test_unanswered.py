"""A client that hears no broker is told the real cause: with no credentials, a secure broker that drops
it looks the same as no broker at all, so the error says which home's credentials it needs."""

from __future__ import annotations

from confluent_kafka import KafkaError as RdKafkaError

from trainmedic.bus.clients import broker_error
from trainmedic.bus.settings import KafkaSettings


def test_without_credentials_the_error_names_the_missing_credentials(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TRAINMEDIC_HOME", str(tmp_path))
    settings = KafkaSettings(bootstrap="127.0.0.1:9092")
    said = str(broker_error(settings, "list topics", RdKafkaError(RdKafkaError._ALL_BROKERS_DOWN), 5))
    assert said.startswith("no Kafka broker answered at 127.0.0.1:9092 within 5s")
    folder = tmp_path / "credentials"
    assert f"no credentials were used (no TRAINMEDIC_KAFKA_CONFIG, no role file in {folder})" in said
    assert "set TRAINMEDIC_HOME to the home that started it" in said


def test_with_credentials_it_is_a_broker_that_is_not_there() -> None:
    settings = KafkaSettings(bootstrap="127.0.0.1:9092", extra={"security.protocol": "SASL_PLAINTEXT"})
    said = str(broker_error(settings, "list topics", RdKafkaError(RdKafkaError._TRANSPORT), 5))
    assert "; start one with `trainmedic broker start`" in said and "credentials" not in said


def test_it_says_what_was_tried() -> None:
    settings = KafkaSettings(bootstrap="127.0.0.1:9093", extra={
        "security.protocol": "SASL_SSL", "ssl.ca.location": "/creds/ca.pem"})
    said = settings.unanswered(5, "Local: Broker transport failure")
    assert said.startswith("no Kafka broker answered at 127.0.0.1:9093 within 5s (Local: Broker transport "
                           "failure; security.protocol SASL_SSL, TLS with CA file /creds/ca.pem)")
    assert said.endswith("; start one with `trainmedic broker start`")  # loopback: it may be this host's


def test_a_broker_on_another_host_is_not_started_from_here(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TRAINMEDIC_HOME", str(tmp_path))
    remote = KafkaSettings(bootstrap="node1.example:9092", extra={
        "security.protocol": "SASL_SSL", "ssl.ca.location": "/creds/ca.pem"})
    said = remote.unanswered(5, "x")
    assert "broker start" not in said
    assert "(x; security.protocol SASL_SSL, TLS with CA file /creds/ca.pem)" in said
    assert "check that the broker runs on that host, that node1.example:9092 is reachable from here" in said
    assert "the role file and its CA are that broker's (a certificate not signed by that CA" in said
    plain = KafkaSettings(bootstrap="127.0.0.1:9092,10.0.0.5:9092").unanswered(5, "x")
    assert "broker start" not in plain and "security.protocol PLAINTEXT" in plain
    assert "no credentials were used" in plain and "TLS" not in plain
    for loopback in ("localhost:9092", "[::1]:9092", "127.0.1.1:9092"):
        assert "`trainmedic broker start`" in KafkaSettings(bootstrap=loopback).unanswered(5, "x")
