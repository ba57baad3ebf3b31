"""Issue 44: every librdkafka client is back within seconds of its broker (reconnect settings of our
own), and the user's settings still win."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import Producer

from trainmedic.bus import clients
from trainmedic.bus.consumer import EventConsumer
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings

FAST = {"socket.timeout.ms": 10_000, "reconnect.backoff.ms": 100, "reconnect.backoff.max.ms": 1000,
        "socket.connection.setup.timeout.ms": 5000}


def test_the_defaults_retry_within_a_second_and_give_up_a_dead_try_after_five() -> None:
    assert clients.RECONNECT == FAST
    config = clients.configuration(KafkaSettings(), {"group.id": "g"})
    assert {key: config[key] for key in FAST} == FAST and config["group.id"] == "g"


def test_the_callers_defaults_and_then_the_users_settings_win() -> None:
    user = KafkaSettings(extra={"reconnect.backoff.max.ms": "10000"})
    config = clients.configuration(user, {"socket.connection.setup.timeout.ms": 30000})
    assert config["reconnect.backoff.max.ms"] == "10000"  # the user's, as given
    assert config["socket.connection.setup.timeout.ms"] == 30000  # the caller's
    assert config["reconnect.backoff.ms"] == 100


def test_librdkafka_knows_the_settings() -> None:
    Producer(clients.configuration(KafkaSettings()), logger=logging.getLogger("test"))  # raises on unknown


@pytest.fixture
def made(monkeypatch) -> dict[str, dict]:
    """The configuration of each client made, by kind (none connects)."""
    seen: dict[str, dict] = {}

    def fake(kind):
        def make(config, **_):
            seen[kind] = config
            return type("Client", (), {"subscribe": lambda self, topics: None})()
        return make

    for kind in ("Producer", "Consumer", "_Admin"):  # _Admin: the AdminClient clients.admin makes
        monkeypatch.setattr(clients, kind, fake(kind))
    return seen


def test_producers_consumers_and_admin_clients_carry_them(made: dict[str, dict]) -> None:
    settings = KafkaSettings(extra={"reconnect.backoff.ms": "50"})
    assert EventProducer(settings).client is not None
    assert EventConsumer(settings, ["t"], "g").client is not None
    clients.admin(settings)
    assert sorted(made) == ["Consumer", "Producer", "_Admin"]
    for config in made.values():
        assert config["reconnect.backoff.max.ms"] == 1000
        assert config["socket.connection.setup.timeout.ms"] == 5000
        assert config["reconnect.backoff.ms"] == "50"  # the user's
