"""The one place that builds librdkafka clients (`KafkaSettings.client_config`: our defaults with the
user's settings on top), and says what their errors mean for people (`broker_error`).
"""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import KafkaError as RdKafkaError
from confluent_kafka.admin import AdminClient

from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import KafkaError

__all__ = ["NOT_READY", "admin", "broker_error", "consumer", "not_ready", "producer"]

log = logging.getLogger(__name__)

# Errors a broker gives for a topic created moments ago (or while it is still starting): they
# pass within seconds, so callers retry them for a bounded time instead of failing.
NOT_READY = frozenset({
    RdKafkaError.NOT_LEADER_FOR_PARTITION, RdKafkaError.LEADER_NOT_AVAILABLE,
    RdKafkaError.UNKNOWN_TOPIC_OR_PART, RdKafkaError._TIMED_OUT,
})
# Errors that mean no broker answered at all.
_UNREACHABLE = frozenset({RdKafkaError._TRANSPORT, RdKafkaError._TIMED_OUT, RdKafkaError._ALL_BROKERS_DOWN})


def consumer(settings: KafkaSettings, config: dict[str, object], *,
             logger: logging.Logger = log) -> Consumer:
    """A consumer with `config` (group id, offsets policy) as our defaults; created now."""
    try:
        return Consumer(settings.client_config(**config), logger=logger)
    except KafkaException as err:
        raise KafkaError(f"cannot create a Kafka consumer: {err}") from None


def producer(settings: KafkaSettings, config: dict[str, object], *,
             logger: logging.Logger = log) -> Producer:
    """A producer with `config` (idempotence, batching) as our defaults; created now."""
    try:
        return Producer(settings.client_config(**config), logger=logger)
    except KafkaException as err:
        raise KafkaError(f"cannot create a Kafka producer: {err}") from None


def admin(settings: KafkaSettings) -> AdminClient:
    """An admin client (topics, metadata)."""
    return AdminClient(settings.client_config())


def not_ready(code: RdKafkaError) -> bool:
    """Whether the error passes by itself within seconds (see NOT_READY)."""
    return code.code() in NOT_READY


def broker_error(settings: KafkaSettings, what: str, code: RdKafkaError, timeout_s: float) -> KafkaError:
    """`code` as a KafkaError for people: an unreachable broker is named with its address."""
    if code.code() in _UNREACHABLE:
        return KafkaError(settings.unanswered(timeout_s, code.str()), code=code.name(), retryable=True)
    return KafkaError(f"{what}: {code.str()}", code=code.name(), retryable=code.retriable())
