"""A producer whose sends land together or not at all, and that a newer instance with the same
transactional id fences (docs/coordinator.md, "The adapter, restarts and fail-over").
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka import KafkaException

from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import KafkaError

log = logging.getLogger(__name__)


class Fenced(KafkaError):
    """Another instance with this transactional id took over: this one must stop writing."""


class TransactionalProducer(EventProducer):
    """An EventProducer whose sends happen inside `with producer.transaction():`.

    `transactional.id` names the writer, not the process: when a second instance calls `init()`
    with the same id, the broker aborts the first one's open transaction and refuses its every
    later write (`Fenced`). Readers see a transaction's messages only once it is committed
    (librdkafka's default `isolation.level=read_committed`)."""

    def __init__(self, settings: KafkaSettings, *, transactional_id: str, timeout_s: float = 30.0,
                 transaction_timeout_s: float = 60.0, linger_ms: int = 0,
                 config: dict[str, object] | None = None) -> None:
        super().__init__(settings, client_id=transactional_id, config={
            "transactional.id": transactional_id,
            # one dead mid-transaction holds readers back at most this
            "transaction.timeout.ms": int(transaction_timeout_s * 1000),
            "linger.ms": linger_ms,  # 0: a transaction is a handful of records, sent at once
            **(config or {}),
        })
        self.transactional_id = transactional_id
        self._timeout_s = timeout_s

    def init(self) -> None:
        """Register with the broker: aborts what an older instance left open and fences it."""
        self._call("initialise transactions", lambda: self.client.init_transactions(self._timeout_s))

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Everything sent inside is committed together on exit, or aborted if the block raises."""
        self._call("begin a transaction", self.client.begin_transaction)
        try:
            yield
        except BaseException:
            self._abort()
            raise
        self._commit()
        self.raise_failures()

    def _commit(self) -> None:
        """Commit; a commit that timed out is retried once (librdkafka allows it), then aborted: left
        half-committed, the producer could begin no other transaction."""
        for attempt in (1, 2):
            try:
                self.client.commit_transaction(self._timeout_s)
                return
            except KafkaException as err:
                code = err.args[0]
                if code.fatal() or code.txn_requires_abort() or not code.retriable() or attempt == 2:
                    break
        if code.fatal():
            raise Fenced(f"{self.transactional_id}: cannot commit the transaction: {code.str()}",
                         code=code.name())
        self._abort()
        raise KafkaError(f"{self.transactional_id}: cannot commit the transaction: {code.str()}",
                         code=code.name(), retryable=True)

    def _abort(self) -> None:
        try:
            self.client.abort_transaction(self._timeout_s)
        except KafkaException as err:
            log.warning("%s: could not abort the transaction: %s", self.transactional_id, err.args[0].str())

    def _call(self, what: str, call) -> None:
        try:
            call()
        except KafkaException as err:
            code, name = err.args[0], self.transactional_id
            if code.fatal():  # fenced by a newer instance, or the broker forgot this producer
                raise Fenced(f"{name}: cannot {what}: {code.str()}", code=code.name()) from None
            if code.txn_requires_abort():
                self._abort()
            raise KafkaError(f"{name}: cannot {what}: {code.str()}", code=code.name(),
                             retryable=code.retriable() or code.txn_requires_abort()) from None
