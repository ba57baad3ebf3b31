"""The Faust engine's side of checkpoints: the consumer engine's checkpoint, saved from and restored
into a Faust app; one worker per app id (docs/streams.md, "State: one checkpoint, both engines,
with its offsets", "Two engines, one pipeline").
"""

from __future__ import annotations

import asyncio
import logging
import time

import faust

from trainmedic.bus.admin import describe_topics
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import KafkaError
from trainmedic.streams.checkpoints.contents import Cadence, Offsets, encode_checkpoint
from trainmedic.streams.checkpoints.topic import CheckpointTopic
from trainmedic.streams.live import LiveDetector
from trainmedic.streams.read_check import ReadCheck

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
        self.whole: bool | None = None  # as of the last rebalance, it reads every telemetry partition
        self._tps: set = set()  # the telemetry partitions assigned to it
        self._partial = self._counted = False  # it read only some since; it warned of a failed count
        self.partition_counts = lambda: describe_topics(settings)  # the broker's topics: partitions

    def sent(self, delivery: asyncio.Future) -> None:
        self.pending.append(asyncio.ensure_future(delivery))

    async def on_rebalance_complete(self, sender: object = None, **kwargs: object) -> None:
        """Before Faust seeks to the group's committed offsets: the first time, restore the live
        detector from the last checkpoint; every time, commit the offsets the live state reflects,
        so Faust's seek lands exactly there. Partitions taken from this worker stay in its `offsets`
        on purpose: its state reflects them, unconfirmed they start a blind spell, and read again
        they are read from where its state stops; dropped, it would skip what another worker read
        and take the nodes for silent (tests/integration/streams/test_faust_workers.py)."""
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
        self._tps = {tp for tp in consumer.assignment() if tp.topic in self._telemetry}
        self.whole, self._counted = None, False
        await self.check_whole()
        positions = {tp: self.offsets.get((tp.topic, tp.partition), 0) for tp in consumer.assignment()
                     if tp.topic in self._telemetry
                     and (self.from_checkpoint or (tp.topic, tp.partition) in self.offsets)}
        for tp, at in positions.items():  # read from there: what "reads are complete" is measured by
            self.offsets.setdefault((tp.topic, tp.partition), at)
        # Faust has no public commit of given offsets. It returns False when the group rebalanced
        # meanwhile: Faust then skips its seek, and the next rebalance commits again.
        if positions and not await consumer._commit(positions):  # noqa: SLF001
            log.warning("offsets not committed (the group is rebalancing again)")

    async def standby(self) -> None:
        """At each tick: a worker that could not count counts again, and one known to be given only
        some partitions pauses them (Faust resumes every partition after a rebalance). Only a rebalance
        ends that, and Faust then seeks to the offsets committed for it: a pause drops messages fetched
        already, and resumed in place they were never read. Best effort: Faust's flow control resumes a
        partition whose stream buffer drains, and what it reads then is held, not decided."""
        if self.whole is None:
            await self.check_whole()
        if self.whole is False:
            self.app.consumer.pause_partitions(self._tps)

    async def check_whole(self) -> None:
        """Whether this worker is given every telemetry partition (`whole`); if not, it reads and
        decides nothing (`standby`, `reads_complete`), and the partitions it lacks hold event time
        back too (`LiveDetector.expect`: one that never read them would move on without them; one that
        did stops confirming reads, and a blind spell holds it). Not known (no broker answer): None,
        not paused, and no reads confirmed until a count at a later tick."""
        try:
            topics = await asyncio.to_thread(self.partition_counts)
            counts = {topic: topics[topic] for topic in sorted(self._telemetry)}
        except (KafkaError, KeyError) as err:
            if not self._counted:
                log.warning("telemetry partitions not counted (%s): no reads confirmed until they are", err)
                self._counted = True  # warned once after a rebalance
            return
        total = sum(counts.values())
        self.whole = len(self._tps) >= total
        if not self.whole:
            every = {(topic, p) for topic, n in counts.items() for p in range(n)}
            self.live.expect(sorted(every - {(tp.topic, tp.partition) for tp in self._tps}), time.time())
            self._partial = True
            log.error("this worker was given %d of the %d telemetry partitions: another worker runs with "
                      "app id %r. A detector must read them all (a lost node and its peers' errors are "
                      "decided together): it reads and decides nothing until it is given them all. Run one "
                      "Faust worker per app id; to scale out, run the sharded detector (docs/streams.md)",
                      len(self._tps), total, self.topic.app_id)
            return
        if self._partial:
            self._partial = False
            log.warning("this worker reads every telemetry partition again: deciding")

    def reads_complete(self, reads: ReadCheck, wall: float) -> float | None:
        """The wall time up to which reads are newly known complete (`ReadCheck.poll`); never while
        this worker reads only some of the partitions, or is not known to read them all: it must not
        decide."""
        return reads.poll(self.offsets, wall) if self.whole else None

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
