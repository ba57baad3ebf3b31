"""The detection core's public face: telemetry in, incidents out, time passed in
(docs/detection.md, "Interface", has its use).
"""

from __future__ import annotations

from collections.abc import Callable

from trainmedic.schemas import telemetry, wire
from trainmedic.schemas.incident import Incident
from trainmedic.streams.core.config import DetectorConfig
from trainmedic.streams.core.deadlines import Deadlines, Timer
from trainmedic.streams.core.incidents import IncidentBook
from trainmedic.streams.core.job_rules import JobRules
from trainmedic.streams.core.limits import LimitCounts
from trainmedic.streams.core.node_rules import NIC_KEY_SEP, NodeRules
from trainmedic.streams.core.placement import Placed
from trainmedic.streams.core.state import DetectorState


class Detector:
    """Pure and deterministic: the same events in the same order give the same incidents,
    whatever the wall clock, however often `advance` is called in between."""

    def __init__(self, config: DetectorConfig | None = None,
                 state: DetectorState | None = None, placed: Placed | None = None) -> None:
        """`placed`: the coordinator's signature check of a worker event's placement (placement.py);
        None: generations are taken from any `worker_start`, as without the coordinator's keys."""
        self.config = config or DetectorConfig()
        self.state = state or DetectorState()
        self.placed = placed
        self._timers = Deadlines()
        self._book = IncidentBook(self.state, self.config, self._timers)
        self._nodes = NodeRules(self.state, self.config, self._book, self._timers)
        self._jobs = JobRules(self.state, self.config, self._book, self._timers, self._nodes, placed)
        self._on: dict[type, Callable] = {}
        for kinds in (telemetry, wire):  # the contract's models, and their fast twins (schemas/wire.py)
            self._on.update({
                kinds.GpuSample: self._nodes.on_gpu_sample,
                kinds.NodeHeartbeat: self._nodes.on_heartbeat,
                kinds.WorkerStepped: self._jobs.on_step,
                kinds.WorkerStarted: self._jobs.on_start,
                kinds.WorkerFailed: self._jobs.on_error,
                kinds.WorkerExited: self._jobs.on_exit,
            })
        self._on.update({twin: self._on[kind] for kind, twin in wire.TRUSTED.items() if kind in self._on})
        self._fire: dict[Timer, Callable[[str, float], None]] = {
            Timer.NODE_LOST: self._node_lost,
            Timer.RELEASE: self._jobs.release,
            Timer.HANG: self._jobs.check_hang,
            Timer.STRAGGLER: self._jobs.check_stragglers,
            Timer.LINK_STABLE: self._nodes.check_link_stable,
            Timer.STORM: self._book.limits.end_storm,
        }
        self._rearm()

    def observe(self, event: object) -> list[Incident]:
        """Take one telemetry event. Deadlines before its ts fire first, so callers need not
        call `advance` for event time; an event older than the clock is still used."""
        self._apply(event)
        return self._book.take()

    def observe_each(self, events: list, failed: Callable[[int, Exception], None]) -> list[Incident]:
        """`observe` each of `events` in turn; one it raises on (a bug) goes to `failed` with its
        index, not applied in full, and the others go on. The incidents of them all, in order."""
        apply = self._apply
        for n, event in enumerate(events):
            try:
                apply(event)
            except Exception as err:
                failed(n, err)
        return self._book.take()

    def _apply(self, event: object) -> None:
        ts = event.ts
        if ts > self.state.clock:
            self._advance(ts)
        handler = self._on.get(type(event))
        if handler is None:
            raise TypeError(f"not a telemetry event: {type(event).__name__}")
        handler(event)

    def first_failure(self, report: object) -> bool:
        """Whether `report` (a `worker_error` or `worker_exit`) is its rank's first failure report at its
        job's current generation, as far as the events observed so far tell (job_rules.py)."""
        return self._jobs.first_failure(report)

    def take_refused(self) -> list[tuple[object, str]]:
        """The events observed since the last call that were refused as unplaced (placement.py), each
        with the reason, for the caller to dead-letter."""
        return self._jobs.placements.take()

    @property
    def limited(self) -> LimitCounts:
        """What the limits held back since this detector was made (limits.py), and the worker reports
        refused as unplaced (placement.py), for the metrics."""
        return self._book.limits.counts

    def advance(self, now: float) -> list[Incident]:
        """Move the clock to `now` and fire the time-based rules whose deadline is before it.
        An incident decided by a deadline carries the deadline as its ts, not `now`, so
        live (wall clock) and replay (event time) agree."""
        self._advance(now)
        return self._book.take()

    def drain(self) -> list[Incident]:
        """End of input (replay): decide the failure evidence still held for correlation.
        Silence rules (lost nodes, hangs) do not fire: the end of a recording is not silence."""
        self._jobs.drain()
        return self._book.take()

    def _advance(self, now: float) -> None:
        pop, fire = self._timers.pop_before, self._fire
        while (due := pop(now)) is not None:
            when, kind, key = due
            fire[kind](key, when)
        if now > self.state.clock:
            self.state.clock = now

    def _node_lost(self, name: str, when: float) -> None:
        """A node's heartbeat deadline: it may be lost, and a job with no rank running elsewhere over."""
        self._nodes.check_lost(name, when)
        self._jobs.node_lost(name, when)

    def _rearm(self) -> None:
        """Rebuild the deadline heap from restored state (it is a cache, not state)."""
        cfg, arm = self.config, self._timers.arm
        for name, node in self.state.nodes.items():
            if node.interval is not None and node.lost_since is None:
                arm(Timer.NODE_LOST, name, node.last_seen + cfg.heartbeat.timeout_s(node.interval))
            for nic_name, nic in node.nics.items():
                if nic.flap_id is not None and nic.up:
                    arm(Timer.LINK_STABLE, f"{name}{NIC_KEY_SEP}{nic_name}",
                        nic.up_ts + cfg.link.stable_s)
        for name, job in self.state.jobs.items():
            if job.group is not None:
                arm(Timer.RELEASE, name, job.group.release)
            if not job.finishing and job.fatal_id is None:
                arm(Timer.HANG, name, job.last_progress + job.threshold)
            if job.straggler_due is not None:
                arm(Timer.STRAGGLER, name, job.straggler_due)
        self._book.limits.rearm()
