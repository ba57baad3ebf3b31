"""Reading a backlog without holding all of it: which partitions the consumer engine stops reading once
more than `pause_at` events are held and waiting (docs/streams.md, "Reading a backlog: in order,
without holding all of it").
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
