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
