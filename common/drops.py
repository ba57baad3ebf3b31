"""Counting what a producer could not send, so that a loss is never silent."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class DropLedger:
    """Counts dropped events: in all (`total`) and since deliveries last succeeded (`outage`).
    Thread-safe: the training hook counts from the training thread, deliveries from its sender."""

    total: int = 0
    outage: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def drop(self, count: int = 1) -> bool:
        """Count `count` drops; True when they start an outage (the moment to say so)."""
        with self._lock:
            starts = self.outage == 0
            self.total += count
            self.outage += count
            return starts

    def delivered(self) -> int:
        """A delivery succeeded: returns how many were dropped in the outage it ends (0 if none)."""
        if not self.outage:  # the common case, without taking the lock
            return 0
        with self._lock:
            ended, self.outage = self.outage, 0
            return ended
