"""What the LiveDetector tests feed it, and a core that records what it is fed (in order), so a
test can check what was released and when."""

from __future__ import annotations

import trainmedic.schemas as s
from trainmedic.streams.core import Detector


class Recording(Detector):
    """A core that only keeps what it observes, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []

    def _apply(self, event) -> None:
        self.seen.append(event)
        self.state.clock = max(self.state.clock, event.ts)


def beat(ts: float, node: str) -> tuple:
    return ts, s.NodeHeartbeat.model_construct(ts=ts, node=node, interval=1.0), None
