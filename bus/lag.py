"""Consumer lag of a group, sampled every few seconds into `trainmedic_consumer_lag`, by a client that
never joins the group, so it works for any group, a Faust app's too (docs/metrics.md).
"""

from __future__ import annotations

import logging
import threading

from confluent_kafka import Consumer, KafkaException, TopicPartition

from trainmedic.bus import clients, metrics
from trainmedic.bus.settings import KafkaSettings

log = logging.getLogger(__name__)


def lag(committed: int, low: int, high: int) -> int:
    """Messages not committed yet; a partition with no commit lags by everything it still holds."""
    return max(0, high - (committed if committed >= 0 else low))


class LagSampler:
    """A daemon thread that samples `group`'s lag on `topics` every `interval_s` until `stop()`."""

    def __init__(self, settings: KafkaSettings, group: str, topics: list[str], *,
                 interval_s: float = 5.0) -> None:
        self._settings = settings
        self._group = group
        self._topics = list(topics)
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lag-{group}", daemon=True)

    def start(self) -> LagSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        client = clients.consumer(self._settings, {"group.id": self._group, "enable.auto.commit": False},
                                  logger=log)
        try:
            while not self._stop.is_set():
                try:
                    self.sample(client)
                except KafkaException as err:
                    log.debug("lag of %s not sampled: %s", self._group, err.args[0].str())
                self._stop.wait(self._interval_s)
        finally:
            client.close()

    def sample(self, client: Consumer) -> None:
        meta = client.list_topics(timeout=5.0)
        parts = [TopicPartition(t, p) for t in self._topics if t in meta.topics
                 for p in meta.topics[t].partitions]
        for part in client.committed(parts, timeout=5.0):
            low, high = client.get_watermark_offsets(part, timeout=5.0)
            metrics.CONSUMER_LAG.labels(self._group, part.topic, str(part.partition)).set(
                lag(part.offset, low, high))
