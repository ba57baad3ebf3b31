"""A producer of contract events: idempotent, acks=all, bounded, and loud about failed deliveries; a dead
letter the dlq did not take is retried, then counted, never raised (docs/security.md, "Poison records").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import KafkaError as RdKafkaError
from confluent_kafka import KafkaException, Message, Producer
from pydantic import BaseModel

from trainmedic.bus import clients
from trainmedic.bus.metrics import DEAD_LETTER_FAILURES
from trainmedic.bus.settings import KafkaSettings
from trainmedic.bus.telemetry_keys import Signer
from trainmedic.common.errors import DeliveryError, KafkaError
from trainmedic.schemas import DeadLettered, encode

log = logging.getLogger(__name__)

DeliveryCallback = Callable[[RdKafkaError | None, Message], None]

DLQ_ATTEMPTS = 3  # writes of one dead letter, in all, before it is given up (counted and logged)


class EventProducer:
    """Sends events as JSON. A delivery the broker refuses is raised on the next send or flush.

    The client is created on first use, never in the constructor. `max_buffered` bounds the
    local queue; when it is full `send` waits up to `block_s` for room, then raises a
    retryable KafkaError (callers that must never block pass `block_s=0` and count drops).
    A dead letter (anything sent to the dlq topic) is never raised: see `_send_dead_letter`.
    """

    def __init__(
        self, settings: KafkaSettings, *, client_id: str | None = None,
        max_buffered: int = 100_000, config: dict[str, object] | None = None,
    ) -> None:
        self._settings = settings
        self._config = {
            "client.id": client_id or settings.topics.owned("producer"),
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "lz4",
            "queue.buffering.max.messages": max_buffered,
            **(config or {}),
        }
        self._client: Producer | None = None
        self._failures: list[DeliveryError] = []
        key = settings.telemetry_key
        self._signer = None if key is None else Signer(key, settings.topic_prefix)
        topics = settings.topics
        self._telemetry = frozenset((topics.gpu, topics.node, topics.worker))

    @property
    def client(self) -> Producer:
        if self._client is None:
            self._client = clients.producer(self._settings, self._config, logger=log)
        return self._client

    def send(
        self, topic: str, event: BaseModel | bytes | None, key: str | bytes | None = None, *,
        block_s: float = 5.0, on_delivery: DeliveryCallback | None = None,
    ) -> None:
        """Queue one event for `topic` (None: a tombstone for `key`, on a compacted topic); raises if
        an earlier delivery failed or the queue stays full."""
        self.raise_failures()
        value = event if event is None or isinstance(event, bytes) else encode(event)
        if topic == self._settings.topics.dlq:
            self._send_dead_letter(topic, value, key, block_s)
            return
        deadline = time.monotonic() + block_s
        headers = (self._signer.headers(value, getattr(event, "node", None))
                   if self._signer is not None and topic in self._telemetry and value is not None else None)

        def delivered(err: RdKafkaError | None, msg: Message) -> None:
            if err is not None:
                self._failures.append(DeliveryError(
                    f"delivery to {msg.topic()} failed: {err.str()}",
                    code=err.name(), retryable=err.retriable(),
                ))
            if on_delivery is not None:
                on_delivery(err, msg)

        while True:
            try:
                self.client.produce(topic, value, key, on_delivery=delivered, headers=headers)
                break
            except BufferError:
                if time.monotonic() >= deadline:
                    raise KafkaError(
                        f"producer queue full for {block_s:.1f}s: is the broker at "
                        f"{self._settings.bootstrap} reachable?",
                        code="_QUEUE_FULL", retryable=True,
                    ) from None
                self.client.poll(0.05)
            except KafkaException as err:
                code = err.args[0]
                raise KafkaError(f"cannot produce to {topic}: {code.str()}", code=code.name()) from None
        self.client.poll(0)

    def _send_dead_letter(self, topic: str, value: bytes | None, key: str | bytes | None, block_s: float,
                          attempt: int = 1, *, in_callback: bool = False) -> None:
        """Queue a dead letter; a write that fails (when queued, or when delivered) is tried again,
        without the value's kept bytes if the letter was too large, up to DLQ_ATTEMPTS writes in
        all; then given up: counted in `trainmedic_dead_letter_failures{outcome="lost"}` and logged.
        From a delivery callback (`in_callback`) it never polls: confluent_kafka aborts the process
        on a poll inside a callback of a poll."""
        def failed(why: str, too_large: bool, in_callback: bool) -> None:
            if attempt >= DLQ_ATTEMPTS:
                DEAD_LETTER_FAILURES.labels("lost").inc()
                log.error("dead letter not written to %s after %d attempts, given up: %s", topic, attempt,
                          why)
                return
            DEAD_LETTER_FAILURES.labels("retried").inc()
            log.warning("dead letter not written to %s (%s): trying again", topic, why)
            again = _without_value(value) if too_large else value
            self._send_dead_letter(topic, again, key, block_s, attempt + 1, in_callback=in_callback)

        def delivered(err: RdKafkaError | None, msg: Message) -> None:
            if err is not None:
                failed(err.str(), err.code() in _TOO_LARGE, in_callback=True)

        deadline = time.monotonic() + block_s
        while True:
            try:
                self.client.produce(topic, value, key, on_delivery=delivered)
                break
            except BufferError:
                if in_callback or time.monotonic() >= deadline:
                    failed("the producer's queue is full", too_large=False, in_callback=in_callback)
                    return
                self.client.poll(0.05)
            except KafkaException as err:
                failed(err.args[0].str(), err.args[0].code() in _TOO_LARGE, in_callback=in_callback)
                return
        if not in_callback:
            self.client.poll(0)

    def pending(self) -> int:
        """Messages queued locally and not yet acknowledged by the broker."""
        return 0 if self._client is None else len(self._client)

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every queued message is delivered; raise if any is not."""
        if self._client is None:
            return
        remaining = self._client.flush(timeout_s)
        if remaining:
            raise DeliveryError(
                f"{remaining} messages not delivered within {timeout_s:.0f}s", retryable=True
            )
        self.raise_failures()

    def raise_failures(self) -> None:
        if self._failures:
            first, count = self._failures[0], len(self._failures)
            self._failures.clear()
            if count > 1:
                log.error("%d deliveries failed; the first: %s", count, first)
            raise first

    def close(self, timeout_s: float = 30.0) -> None:
        self.flush(timeout_s)
        self._client = None

    def __enter__(self) -> EventProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# What librdkafka (its message.max.bytes, 1,000,000 by default) and a broker (the topic's
# max.message.bytes) answer for a message over their limit; a letter is at most MAX_LETTER_BYTES.
_TOO_LARGE = frozenset({RdKafkaError.MSG_SIZE_TOO_LARGE})


def _without_value(value: bytes | None) -> bytes | None:
    """A dead letter without the kept bytes of its value (its size and hash stay), for a dlq that
    refused it as too large; a value that is no letter as it was."""
    try:
        letter = DeadLettered.model_validate_json(value or b"")
    except ValueError:
        return value
    return encode(letter.model_copy(update={"value_b64": "", "value_text": None, "truncated": True}))
