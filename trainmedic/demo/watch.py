"""A background reader of the demo's topics that keeps the timeline and narrates it."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

from trainmedic.bus.consumer import EventConsumer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.demo.timeline import Timeline
from trainmedic.schemas import Incident, WorkerStepped
from trainmedic.schemas.recovery import RecoveryCompleted, RecoveryFailed, RecoveryPlanned

log = logging.getLogger(__name__)


class Watcher:
    """Reads worker telemetry, the detector's incidents and the coordinator's recovery log into a
    `Timeline` under a lock."""

    def __init__(self, settings: KafkaSettings, job: str, say: Callable[[str], None]) -> None:
        self.timeline = Timeline(job)
        self.lock = threading.Lock()
        self._say = say
        self._stop = threading.Event()
        topics = [settings.topics.worker, settings.topics.incidents, settings.topics.recovery]
        # Under the prefix, where the operator's groups are.
        group = f"{settings.topics.owned('demo')}-watch-{uuid.uuid4().hex[:8]}"
        self._consumer = EventConsumer(settings, topics, group)
        self._thread = threading.Thread(target=self._run, name="demo-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()

    def wait_for(self, condition: Callable[[Timeline], object], timeout_s: float) -> object:
        """Poll `condition(timeline)` until it is truthy (returned) or the timeout passes (None)."""
        return wait_for(self.lock, self.timeline, condition, timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            for record in self._consumer.poll(0.5):
                wall = time.time()
                published = None if record.timestamp_ms is None else record.timestamp_ms / 1000
                with self.lock:
                    self.timeline.apply(record.event, wall, published)
                self._narrate(record.event)

    def _narrate(self, event: object) -> None:
        line = narration(event, self.timeline.job)
        if line is not None:
            self._say(line)


def narration(event: object, job: str) -> str | None:
    """The line the demo (and `trainmedic run`) says about `event`, if any: a restore that fell back,
    an incident opened or resolved, a recovery planned, completed or failed."""
    if isinstance(event, WorkerStepped) and event.restore_warning and event.job == job:
        return (f"WARNING: RESTORE FELL BACK at generation {event.generation}, rank {event.rank} on "
                f"{event.node}: {event.restore_warning}")
    if isinstance(event, Incident):
        where = f"node {event.node}" if event.node else f"job {event.job}"
        if event.status == "open":
            return (f"INCIDENT {event.severity} {event.category} on {where} -> {event.action} "
                    f"(decided {event.ts - event.first_ts:.2f}s after the first evidence)")
        return f"resolved {event.category} on {where}"
    if isinstance(event, RecoveryPlanned) and not event.nodes:
        return (f"recovery: job {event.job} stopped on {', '.join(event.previous) or 'no node'} at "
                f"generation {event.generation}: no node runs it")
    if isinstance(event, RecoveryPlanned):
        return (f"recovery: {event.kind} job {event.job} at generation {event.generation} on "
                f"{', '.join(event.nodes)}")
    if isinstance(event, RecoveryCompleted):
        return f"recovery: every command of generation {event.generation} acknowledged (not yet stepping)"
    if isinstance(event, RecoveryFailed):
        return f"recovery FAILED for job {event.job}: {event.reason}"
    return None


def wait_for(lock, timeline: Timeline, condition: Callable[[Timeline], object], timeout_s: float,
             check: Callable[[], None] = lambda: None) -> object:
    """Poll `condition(timeline)` under `lock` until it is truthy (returned) or `timeout_s` passes
    (None); `check` may raise to give up early (e.g. the process feeding the timeline died)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with lock:
            found = condition(timeline)
        if found:
            return found
        check()
        time.sleep(0.1)
    return None
