"""Read back what a producer sent, through the project's validating consumer."""

from __future__ import annotations

import time
from collections.abc import Callable

from trainmedic.bus.consumer import EventConsumer
from trainmedic.bus.message import Record
from trainmedic.bus.settings import KafkaSettings


def consume_until(
    settings: KafkaSettings, topic: str, group_id: str, done: Callable[[list[Record]], bool],
    *, give_up_s: float = 60.0,
) -> list[Record]:
    """Valid records of `topic` until `done(records)`; `give_up_s` only guards against a hang."""
    records: list[Record] = []
    with EventConsumer(settings, [topic], group_id) as consumer:
        deadline = time.monotonic() + give_up_s
        while not done(records) and time.monotonic() < deadline:
            records += consumer.poll(0.5)
        assert consumer.dead_lettered == 0
    return records
