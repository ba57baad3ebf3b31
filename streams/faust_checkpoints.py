"""The Faust engine's side of checkpoints: the consumer engine's checkpoint, saved from a Faust app.

Restoring: Faust seeks its partitions to the group's committed offsets when a rebalance
completes (after `on_rebalance_complete`, before the agents get anything). The handler here
reads the last checkpoint the first time, restores the live detector from it, and on every
rebalance commits the offsets the live state reflects, so Faust's own seek lands exactly there.
Saving: at the timer's turn (no message half handled), the checkpoint is taken; it is written
once every incident and dead letter sent before it is acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
import time

import faust

from bus.settings import KafkaSettings
from streams.checkpoint import Cadence, Offsets, encode_checkpoint
from streams.checkpoint_topic import CheckpointTopic
from streams.live import LiveDetector

log = logging.getLogger(__name__)

FLUSH_WAIT_S = 5.0  # how long a checkpoint waits for the sends before it to be acknowledged


class FaustCheckpoints:
    """Restores `live` and `offsets` on the first rebalance; `maybe_save` at each tick."""

    def __init__(self, app: faust.App, settings: KafkaSettings, app_id: str, live: LiveDetector,
                 offsets: Offsets, every_s: float = 1.0) -> None:
        self.app, self.live, self.offsets = app, live, offsets
        self.topic = CheckpointTopic(settings, app_id)
        self.cadence = Cadence(every_s)
        self.restored = False  # the last checkpoint was read (or there was none)
        self.from_checkpoint = False  # a checkpoint was restored: partitions it lacks start at 0
        self.pending: list[asyncio.Future] = []  # sends a checkpoint must wait for
        self._telemetry = {settings.topics.gpu, settings.topics.node, settings.topics.worker}

    def sent(self, delivery: asyncio.Future) -> None:
        self.pending.append(asyncio.ensure_future(delivery))

    async def on_rebalance_complete(self, sender: object = None, **kwargs: object) -> None:
        if not self.restored:
            saved = await asyncio.to_thread(self.topic.read_last)
            if saved is not None:
                saved.restore(self.live, time.time())
                self.offsets.update(saved.offsets)
                self.from_checkpoint = True
                log.info("detector state restored from %s (event time %.3f, %d events held)",
                         self.topic.topic, saved.state.clock, len(saved.held))
            self.restored = True
        consumer = self.app.consumer
        positions = {tp: self.offsets.get((tp.topic, tp.partition), 0) for tp in consumer.assignment()
                     if tp.topic in self._telemetry
                     and (self.from_checkpoint or (tp.topic, tp.partition) in self.offsets)}
        for tp, at in positions.items():  # read from there: what "reads are complete" is measured by
            self.offsets.setdefault((tp.topic, tp.partition), at)
        # Faust has no public commit of given offsets. It returns False when the group rebalanced
        # meanwhile: Faust then skips its seek, and the next rebalance commits again.
        if positions and not await consumer._commit(positions):  # noqa: SLF001
            log.warning("offsets not committed (the group is rebalancing again)")

    async def maybe_save(self, now: float, turn: asyncio.Lock) -> None:
        """Take a checkpoint if due, at `turn` (no message half handled), and write it once what
        the detector sent before it is acknowledged (`now` is monotonic)."""
        clock = self.live.detector.state.clock
        self.topic.poll()
        if not self.cadence.due(clock, now):
            return
        began = time.monotonic()
        async with turn:
            data = encode_checkpoint(self.live, self.offsets, time.time(), self.topic.owner, rewind=True)
            waiting, self.pending = self.pending, []
        if waiting:
            _, unsent = await asyncio.wait(waiting, timeout=FLUSH_WAIT_S)
            if unsent:
                self.pending = [*unsent, *self.pending]
                self.cadence.postponed(now)
                log.warning("checkpoint postponed: %d incidents or dead letters not yet acknowledged "
                            "after %.0f s (is the broker up?)", len(unsent), FLUSH_WAIT_S)
                return
            for done in waiting:
                done.result()  # a delivery the producer gave up on stops the detector
        self.topic.write(data)
        self.cadence.saved(clock, now, time.monotonic() - began)
