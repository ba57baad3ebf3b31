"""A producer of contract events: idempotent, acks=all, bounded, and loud about failed deliveries."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import KafkaError as RdKafkaError
from confluent_kafka import KafkaException, Message, Producer
from pydantic import BaseModel

from bus import clients
from bus.errors import DeliveryError, KafkaError
from bus.settings import KafkaSettings
from schemas import encode

log = logging.getLogger(__name__)

DeliveryCallback = Callable[[RdKafkaError | None, Message], None]


class EventProducer:
    """Sends events as JSON. A delivery the broker refuses is raised on the next send or flush.

    The client is created on first use, never in the constructor. `max_buffered` bounds the
    local queue; when it is full `send` waits up to `block_s` for room, then raises a
    retryable KafkaError (callers that must never block pass `block_s=0` and count drops).
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
        deadline = time.monotonic() + block_s

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
                self.client.produce(topic, value, key, on_delivery=delivered)
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
