"""Service settings: environment variables, validation, and librdkafka pass-through."""

from __future__ import annotations

import pytest

from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import ConfigError


def test_defaults() -> None:
    settings = KafkaSettings.from_env({})
    assert settings.bootstrap == "127.0.0.1:9092"
    assert settings.topics.incidents == "trainmedic.incidents"


def test_environment_and_overrides() -> None:
    env = {"TRAINMEDIC_KAFKA_BOOTSTRAP": "k1:9092,k2:9092", "TRAINMEDIC_TOPIC_PREFIX": "prod."}
    assert KafkaSettings.from_env(env).topics.gpu == "prod.telemetry.gpu"
    assert KafkaSettings.from_env(env, bootstrap="cli:1").bootstrap == "cli:1"
    assert KafkaSettings.from_env(env, bootstrap=None).bootstrap == "k1:9092,k2:9092"


def test_librdkafka_settings_pass_through_and_secrets_stay_hidden() -> None:
    env = {"TRAINMEDIC_KAFKA_CONFIG": '{"security.protocol": "SASL_SSL", "sasl.password": "hunter2"}'}
    settings = KafkaSettings.from_env(env)
    config = settings.client_config(**{"acks": "all", "security.protocol": "PLAINTEXT"})
    assert config["security.protocol"] == "SASL_SSL"  # the user's setting wins over our default
    assert config["sasl.password"] == "hunter2"
    assert config["acks"] == "all"
    assert "hunter2" not in repr(settings)


@pytest.mark.parametrize(("env", "message"), [
    ({"TRAINMEDIC_KAFKA_BOOTSTRAP": "localhost"}, "HOST:PORT"),
    ({"TRAINMEDIC_TOPIC_PREFIX": "bad prefix/"}, "letters, digits"),
    ({"TRAINMEDIC_KAFKA_CONFIG": "{not json"}, "not JSON"),
    ({"TRAINMEDIC_KAFKA_CONFIG": "[1]"}, "JSON object"),
])
def test_bad_settings_say_what_is_wrong(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        KafkaSettings.from_env(env)
