"""Reading a backlog without holding all of it: which partitions the consumer engine stops reading.

Past `order_at` events held, `LiveDetector` lets the events that arrive ahead of the slowest
partition wait, unfed, until it catches up (streams/live.py). They are still in memory. So past
`pause_at` events held and waiting, the engine stops reading each partition with more than its share
of `pause_at` waiting, and reads it again once its events are fed: it reads the partitions holding
event time back, and Kafka keeps the rest. About 2 x `pause_at` + `order_at` events at most are so
held and waiting (the sharded decider pauses an events partition only when every telemetry partition
it carries has more than its share waiting, so it may hold more; the Faust engine does not pause).
Kafka Streams bounds what it buffers per partition the same way (it pauses a partition with
`buffered.records.per.partition` records). A partition paused and read again loses what librdkafka
had fetched ahead for it, so a partition with only a little waiting is left alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def to_pause(waiting: dict[tuple, int], buffered: int, paused: frozenset, pause_at: int,
             sources: int) -> frozenset:
    """The sources not to read now, of `sources` in all: with `buffered` (held and waiting) at
    `pause_at` or more, those already `paused` and every other with more than its share of
    `pause_at` waiting; below it, those `paused` that still have events waiting."""
    if buffered < pause_at:
        return frozenset(source for source in paused if source in waiting)
    share = pause_at // max(1, sources)
    return frozenset(source for source, count in waiting.items() if count > share or source in paused)


def unread_waits(partitions: Iterable, paused: frozenset, waiting: Mapping) -> bool:
    """Whether each of `partitions` not read now (`paused`) has events waiting: what is unread in it
    comes after them in its partition, and they hold event time back, so reads known complete for
    the partitions read are complete for all (`LiveDetector.caught_up`), and with none read (each
    paused with events waiting, as while event time stands still) they are complete now."""
    return all(tp in waiting for tp in partitions if tp in paused)
