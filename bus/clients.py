"""The one place that builds librdkafka clients (`configuration`: our defaults, the caller's, then the
user's settings on top), and says what their errors mean for people (`broker_error`). Every client logs
through Python's logging, each condition once a while with a count (`bus/log_repeats.py`).
"""

from __future__ import annotations

import logging
import sys

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import KafkaError as RdKafkaError
from confluent_kafka.admin import AdminClient

from trainmedic.bus.log_repeats import SUMMARY, Repeats
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import KafkaError

__all__ = ["NOT_READY", "RECONNECT", "admin", "broker_error", "configuration", "consumer", "not_ready",
           "producer", "served"]

log = logging.getLogger(__name__)
REPEATS = Repeats()  # on every logger a client logs to: librdkafka's lines, one per condition

# Errors a broker gives for a topic created moments ago (or while it is still starting), and
# librdkafka's own for one its metadata does not hold yet (a detector on a cluster of three brokers
# exited with "Local: Unknown partition" at start, once in a CI run): they pass within seconds, so
# callers retry them for a bounded time instead of failing.
NOT_READY = frozenset({
    RdKafkaError.NOT_LEADER_FOR_PARTITION, RdKafkaError.LEADER_NOT_AVAILABLE,
    RdKafkaError.UNKNOWN_TOPIC_OR_PART, RdKafkaError._TIMED_OUT,
    RdKafkaError._UNKNOWN_PARTITION, RdKafkaError._UNKNOWN_TOPIC,
})
# Errors that mean no broker answered at all.
_UNREACHABLE = frozenset({RdKafkaError._TRANSPORT, RdKafkaError._TIMED_OUT, RdKafkaError._ALL_BROKERS_DOWN})

# How soon a client is back once its broker can be reached again. librdkafka's own defaults keep a
# connection whose peer went silent for 60 s (socket.timeout.ms: its requests wait that long), so after a
# partition the kernel's retransmission back-off decides when it speaks again (16-32 s after a 30 s
# outage); they wait up to 10 s between tries (reconnect.backoff.max.ms, plus up to 50 % of jitter), and
# up to 30 s on a try whose packets go nowhere (socket.connection.setup.timeout.ms). A node whose link
# came back was on Kafka 24 s later (issue 44, measured on the multi-host bed). With these, a request
# unanswered for 10 s drops its connection, a try is at most 5 s long and the next one at most 1.5 s
# away, so a node is back within a few seconds of its link. The user's settings (TRAINMEDIC_KAFKA_CONFIG,
# a role's file) still win.
RECONNECT: dict[str, object] = {
    "socket.timeout.ms": 10_000,
    "reconnect.backoff.ms": 100,
    "reconnect.backoff.max.ms": 1000,
    "socket.connection.setup.timeout.ms": 5000,
}


def configuration(settings: KafkaSettings, config: dict[str, object] | None = None) -> dict[str, object]:
    """A client's librdkafka configuration: RECONNECT, then `config` (the caller's defaults), then the
    user's settings on top (`KafkaSettings.client_config`)."""
    return settings.client_config(**{**RECONNECT, **(config or {})})


def consumer(settings: KafkaSettings, config: dict[str, object], *,
             logger: logging.Logger = log) -> Consumer:
    """A consumer with `config` (group id, offsets policy) as our defaults; created now."""
    try:
        return Consumer(configuration(settings, config), logger=_quiet(logger))
    except KafkaException as err:
        raise KafkaError(f"cannot create a Kafka consumer: {err}") from None


def producer(settings: KafkaSettings, config: dict[str, object], *,
             logger: logging.Logger = log) -> Producer:
    """A producer with `config` (idempotence, batching) as our defaults; created now."""
    try:
        return Producer(configuration(settings, config), logger=_quiet(logger))
    except KafkaException as err:
        raise KafkaError(f"cannot create a Kafka producer: {err}") from None


class _Admin(AdminClient):
    """An admin client that hands the log lines it holds to `log` when it is done with, and the counts
    of the repeats REPEATS held: one holds its lines until polled, and ours live for a call or two (a
    waiting loop polls it too: bus/admin.py). Once `served` last, it says nothing more."""

    said_last = False

    def __del__(self) -> None:
        if not self.said_last and not sys.is_finalizing():  # at the interpreter's exit, logging may be gone
            served(self)


def served(client: AdminClient, last: bool = False) -> None:
    """Hands the log lines `client` holds to its logger now (one per condition: REPEATS), then the
    counts of the repeats held. `last`: an error the caller is about to raise follows, and the tries
    the client still makes until it is gone are not counted again (a late one made a second count
    line after the error's summary, under load in CI)."""
    client.poll(0)
    for name, level, line in REPEATS.summary():
        logging.getLogger(name).log(level, line, extra={SUMMARY: True})
    if last and isinstance(client, _Admin):
        client.said_last = True


def admin(settings: KafkaSettings) -> AdminClient:
    """An admin client (topics, metadata)."""
    return _Admin(configuration(settings, {"logger": _quiet(log)}))


def _quiet(logger: logging.Logger) -> logging.Logger:
    """`logger` with the REPEATS filter on it."""
    if REPEATS not in logger.filters:
        logger.addFilter(REPEATS)
    return logger


def not_ready(code: RdKafkaError) -> bool:
    """Whether the error passes by itself within seconds (see NOT_READY)."""
    return code.code() in NOT_READY


def broker_error(settings: KafkaSettings, what: str, code: RdKafkaError, timeout_s: float) -> KafkaError:
    """`code` as a KafkaError for people: an unreachable broker is named with its address."""
    if code.code() in _UNREACHABLE:
        return KafkaError(settings.unanswered(timeout_s, code.str()), code=code.name(), retryable=True)
    return KafkaError(f"{what}: {code.str()}", code=code.name(), retryable=code.retriable())
