"""Shared fixtures. `kafka` gives a real broker: never a mock, never a skip.

Where the broker comes from, in order: TRAINMEDIC_KAFKA_BOOTSTRAP if set; else a
testcontainers Kafka where a Docker engine answers; else the project's own local broker
(`trainmedic broker start`), started once for the session and stopped after it if the
session started it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainmedic.settings import KafkaSettings

ROOT = Path(__file__).resolve().parent.parent


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=2).ping()
    except Exception:  # any failure means: no engine to use
        return False
    return True


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """The bootstrap address of a real, running Kafka broker."""
    if os.environ.get("TRAINMEDIC_KAFKA_BOOTSTRAP"):
        yield os.environ["TRAINMEDIC_KAFKA_BOOTSTRAP"]
        return
    if _docker_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer("apache/kafka:3.9.1").with_kraft() as container:
            yield container.get_bootstrap_server()
        return
    from trainmedic.broker import LocalBroker
    from trainmedic.settings import home

    broker = LocalBroker(home(), port=int(os.environ.get("TRAINMEDIC_BROKER_PORT", "9092")))
    state, started = broker.start()
    try:
        yield state.bootstrap
    finally:
        if started:
            broker.stop()


@pytest.fixture
def kafka(kafka_bootstrap: str) -> KafkaSettings:
    """Settings for a real broker with a topic prefix of this test's own, topics created."""
    from trainmedic.kafka import create_topics

    settings = KafkaSettings(bootstrap=kafka_bootstrap, topic_prefix=f"t{uuid.uuid4().hex[:10]}.")
    create_topics(settings, partitions=2)
    return settings


@pytest.fixture
def group_id() -> str:
    """A consumer group of this test's own."""
    return f"test-{uuid.uuid4().hex[:12]}"
