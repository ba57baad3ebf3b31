"""Which incident events still have to reach which sink, and which offsets are safe to commit.

Each sink has a FIFO queue and is served head first, so an incident's resolve never overtakes
its trigger; a failed head waits out an exponential backoff while other sinks go on. A message's
offset becomes committable only once every sink it was routed to is done with it, and then only
when every earlier offset of its partition is done too. Pure: time is passed in.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from trainmedic.ops.alerts.config import RetryConfig
from trainmedic.schemas.incident import Incident

Position = tuple[str, int, int]  # topic, partition, offset


def backoff_s(retry: RetryConfig, attempts: int) -> float:
    """Wait after the `attempts`-th failed attempt: initial_s x factor^(attempts-1), at most max_s."""
    return min(retry.max_s, retry.initial_s * retry.factor ** max(0, attempts - 1))


@dataclass
class Delivery:
    """One incident event for one sink; `attempts` failed so far, not to be tried before `due`."""

    incident: Incident
    position: Position | None
    attempts: int = 0
    due: float = 0.0


class OffsetTracker:
    """Per partition, the offsets handed out and not yet done; commits never pass a pending one."""

    def __init__(self) -> None:
        self._pending: dict[tuple[str, int], dict[int, int]] = {}
        self._next: dict[tuple[str, int], int] = {}

    def add(self, position: Position, deliveries: int) -> None:
        topic, partition, offset = position
        where = (topic, partition)
        self._next[where] = max(self._next.get(where, 0), offset + 1)
        if deliveries:
            self._pending.setdefault(where, {})[offset] = deliveries

    def done(self, position: Position) -> None:
        topic, partition, offset = position
        pending = self._pending.get((topic, partition), {})
        pending[offset] -= 1
        if not pending[offset]:
            del pending[offset]

    def committable(self) -> dict[tuple[str, int], int]:
        """Partition -> the offset to commit: the first still pending, else one past the last seen."""
        out = {}
        for where, end in self._next.items():
            pending = self._pending.get(where)
            out[where] = min(pending) if pending else end
        return out


class DeliveryBook:
    """Per-sink queues of deliveries, bounded in all by `backlog_max`, and the offsets they hold back."""

    def __init__(self, sinks: list[str], retry: RetryConfig, backlog_max: int) -> None:
        self.queues: dict[str, deque[Delivery]] = {name: deque() for name in sinks}
        self.retry = retry
        self.backlog_max = backlog_max
        self.offsets = OffsetTracker()

    @property
    def full(self) -> bool:
        """True while no new message should be taken (the caller pauses consumption)."""
        return self.backlog() >= self.backlog_max

    def backlog(self, sink: str | None = None) -> int:
        if sink is not None:
            return len(self.queues[sink])
        return sum(len(q) for q in self.queues.values())

    def admit(self, incident: Incident | None, position: Position | None, sinks: list[str]) -> None:
        """A consumed message: queue its incident for `sinks` (none: its offset is done at once)."""
        if position is not None:
            self.offsets.add(position, len(sinks) if incident is not None else 0)
        if incident is not None:
            for sink in sinks:
                self.queues[sink].append(Delivery(incident, position))

    def due(self, now: float) -> list[tuple[str, Delivery]]:
        """The head of every sink queue whose backoff has passed."""
        return [(sink, q[0]) for sink, q in self.queues.items() if q and q[0].due <= now]

    def done(self, sink: str) -> Delivery:
        """The head of `sink` reached its end (delivered, or rejected and reported)."""
        delivery = self.queues[sink].popleft()
        if delivery.position is not None:
            self.offsets.done(delivery.position)
        return delivery

    def failed(self, sink: str, now: float) -> float:
        """The head of `sink` failed and will be retried; returns the wait before the next attempt."""
        delivery = self.queues[sink][0]
        delivery.attempts += 1
        wait = backoff_s(self.retry, delivery.attempts)
        delivery.due = now + wait
        return wait
