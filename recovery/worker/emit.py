"""How the runtime reports worker events: an `Emit` callback the in-band hook plugs into.

The in-band training hook (producers/hook.py) is written separately; until it lands,
`init_from_env(emit=...)` takes any callable of a WorkerEvent. `KafkaEmit` is a
minimal stand-in that sends straight to telemetry.worker without ever blocking training.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from schemas import WorkerEvent

log = logging.getLogger(__name__)

Emit = Callable[[WorkerEvent], None]


def no_emit(event: WorkerEvent) -> None:
    """Report nothing (the default)."""


class KafkaEmit:
    """Sends events to telemetry.worker (key job) with the Kafka settings of the environment.

    Never blocks training: a full local queue drops the event and logs the count. `close`
    flushes what is queued.
    """

    def __init__(self) -> None:
        from trainmedic.kafka import EventProducer
        from trainmedic.settings import KafkaSettings

        self._settings = KafkaSettings.from_env()
        self._producer = EventProducer(self._settings, client_id="trainmedic-worker", max_buffered=10_000)
        self.dropped = 0

    def __call__(self, event: WorkerEvent) -> None:
        from trainmedic.errors import KafkaError

        try:
            self._producer.send(self._settings.topics.worker, event, key=event.job, block_s=0)
        except KafkaError as err:
            self.dropped += 1
            log.warning("worker event dropped (%d so far): %s", self.dropped, err)

    def close(self, timeout_s: float = 5.0) -> None:
        self._producer.flush(timeout_s)
