"""Limits on what job reports can raise (docs/detection.md, "Storms: limits on what job reports raise").

Worker reports are written by executors, and a compromised one can write any number of them, so the
incidents they raise (the taxonomy's `Source.JOB` categories) are rate-limited in event time: at most
`limits.node_incidents` per node and `limits.job_incidents` per job within `limits.window_s`. An
incident counts against its job and against the node whose reports raised it: the node it names or,
naming none, the one node its job's ranks run on; never against the other nodes of its job, so a node
that floods cannot hold back what an honest node of a shared job reports. The next one opens one
`storm` incident for that node or job (SEV2, action `alert`: a person looks; nothing is restarted or
isolated), and incidents from job reports there are suppressed until `window_s` after the storm opened.
A suppressed incident is kept in the state like any other, so the job's bookkeeping goes on (its
generation's failure is decided, its steps resolve it), but it is not emitted while held: counted, and
named in the storm's evidence. When the storm is over, what it held that is still open, of a job still
followed, is released: it goes through the limits again and opens then (its job's generation failure
first), or the next storm holds it until that one ends in turn; delayed, never lost. Node evidence
(heartbeats, GPU samples: hardware faults, `node_lost`, link flaps) is never limited, so a storm of job
reports cannot hide a node's real failure. A node also follows at most `limits.node_jobs` jobs: a report
that would add one more (its `worker_start`, or any report of a job not known yet) is not followed and
raises the node's storm.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from trainmedic.schemas.telemetry import WorkerEvent
from trainmedic.streams.core.config import DetectorConfig
from trainmedic.streams.core.deadlines import Deadlines, Timer
from trainmedic.streams.core.state import DetectorState, OpenIncident, Storm

SWEEP_AT = 256  # scopes counted before those with nothing in the window are dropped (then twice as many)


class Book(Protocol):
    """What the limits use of `incidents.IncidentBook`, which owns them (named here: no import cycle)."""

    def open(self, category: str, **fields) -> OpenIncident: ...
    def get(self, iid: str | None) -> OpenIncident | None: ...
    def note(self, rec: OpenIncident, lines: list[str]) -> None: ...
    def resolve(self, rec: OpenIncident, ts: float, why: str) -> None: ...
    def release(self, rec: OpenIncident, ts: float, why: str) -> None: ...


@dataclass
class LimitCounts:
    """What the limits held back since this detector was made (not state: the metrics read it)."""

    suppressed: dict[str, int] = field(default_factory=lambda: {"node": 0, "job": 0})
    refused: int = 0  # worker reports not followed: their node follows limits.node_jobs jobs
    unplaced: int = 0  # worker reports not used: their node holds no placement of their job (placement.py)


class Limits:
    """The rate limits and the per-node job bound; `IncidentBook.open` asks `admit`."""

    def __init__(self, state: DetectorState, config: DetectorConfig, book: Book,
                 timers: Deadlines) -> None:
        self.state, self.config, self.book, self.timers = state, config.limits, book, timers
        self.counts = LimitCounts()
        self._sweep_at = SWEEP_AT

    def admit(self, iid: str, category: str, job: str | None, node: str | None, ts: float) -> bool:
        """Whether an incident from job reports may open at `ts`; False: suppressed, as a node or job it
        counts against storms, or reached its limit now (its storm opens)."""
        scopes = self._scopes(job, node)
        storms = self.state.storms
        held = [key for key in scopes if (storm := storms.get(key)) is not None and storm.until > ts]
        if not held:
            rates, since = self.state.rates, ts - self.config.window_s
            for key in scopes:
                kept = rates[key] = [t for t in rates.get(key, ()) if t > since]
                if len(kept) >= self._limit(key):
                    held.append(key)
            if not held:
                for key in scopes:
                    rates[key].append(ts)
                if len(rates) > self._sweep_at:
                    self._sweep(since)
                return True
            for key in held:
                kind, name = _split(key)
                self._storm(key, ts, f"{ts:.3f} {len(rates[key])} incidents from job reports on {kind} "
                                     f"{name} within {self.config.window_s:g}s (limits.{kind}_incidents)")
        what = f"{ts:.3f} suppressed: {category} {iid}" + (f" of job {job}" if job else "") + (
            f" on {node}" if node else "")
        for key in held:
            storm = storms[key]
            storm.suppressed += 1
            self.counts.suppressed[_split(key)[0]] += 1
            rec = self.book.get(storm.id)
            if rec is not None:
                self.book.note(rec, [what])
        return False

    def crowded(self, ev: WorkerEvent) -> bool:
        """A report that would have its node follow one job more than `node_jobs` (a `worker_start`, or
        any report of a job not known yet): not followed, and the node's storm opens (or notes it)."""
        node = self.state.nodes.get(ev.node)
        cap = self.config.node_jobs
        if node is None or len(node.jobs) < cap or ev.job in node.jobs:
            return False
        self.counts.refused += 1
        ts, key = max(ev.ts, self.state.clock), f"node:{ev.node}"
        line = (f"{ts:.3f} job {ev.job} rank {ev.rank} not followed: node {ev.node} follows {cap} jobs "
                "(limits.node_jobs)")
        storm = self.state.storms.get(key)
        if storm is None or storm.until <= ts:
            storm = self._storm(key, ts, line)
        elif (rec := self.book.get(storm.id)) is not None:
            self.book.note(rec, [line])
        storm.refused += 1
        return True

    def end_storm(self, key: str, when: float) -> None:
        """A storm's window is over: it resolves, saying how many incidents it suppressed."""
        storm = self.state.storms.get(key)
        if storm is None:
            return
        if storm.until > when:
            self.timers.arm(Timer.STORM, key, storm.until)
            return
        self._end(key, storm, when)

    def rearm(self) -> None:
        """Arm every storm's end (the deadline heap is rebuilt from the state)."""
        for key, storm in self.state.storms.items():
            self.timers.arm(Timer.STORM, key, storm.until)

    def _storm(self, key: str, ts: float, why: str) -> Storm:
        storms = self.state.storms
        if (stale := storms.get(key)) is not None:  # its window ended at this very time
            self._end(key, stale, ts, release=False)
        kind, name = _split(key)
        until = ts + self.config.window_s
        counted = self.state.rates.get(key)
        rec = self.book.open(
            "storm", key=kind, root_ts=ts, ts=ts, first_ts=min(counted) if counted else ts,
            job=name if kind == "job" else None, node=name if kind == "node" else None, counts_node=False,
            evidence=[why, f"incidents from job reports on {kind} {name} are suppressed until {until:.3f}; "
                           "node evidence (hardware faults, node_lost) still opens"])
        storm = storms[key] = Storm(rec.id, until)
        self.timers.arm(Timer.STORM, key, until)
        return storm

    def _end(self, key: str, storm: Storm, when: float, release: bool = True) -> None:
        """The storm resolves; with `release`, what it held is released (`_release`). Not when a new
        storm of the same scope replaces it at this very time: that one's end releases it."""
        del self.state.storms[key]
        rec = self.book.get(storm.id)
        if rec is not None:
            refused = f", {storm.refused} worker reports of more jobs not followed" if storm.refused else ""
            self.book.resolve(rec, when, f"window of {self.config.window_s:g}s over: "
                                         f"{storm.suppressed} incidents suppressed{refused}")
        if release:
            self._release(key, when)

    def _release(self, key: str, when: float) -> None:
        """The storm of `key` is over: each incident it held that is still open, of a job still followed
        and held by no other storm, goes through the limits again, each job's generation failure first,
        then the oldest first. Admitted, it opens now; past the limits, the next storm of `key` holds it
        (and the rest, each counted there) until it ends in turn. So a job's real failure is delayed by
        a storm, never lost."""
        jobs, storms = self.state.jobs, self.state.storms
        held = [rec for rec in self.state.incidents.values()
                if rec.suppressed and rec.job in jobs and key in self._scopes(rec.job, rec.node)]
        held.sort(key=lambda rec: (rec.id != jobs[rec.job].fatal_id, rec.first_ts, rec.id))
        kind, name = _split(key)
        for rec in held:
            if any((storm := storms.get(scope)) is not None and storm.until > when
                   for scope in self._scopes(rec.job, rec.node) if scope != key):
                continue  # still held by the storm of its other scope: that one's end releases it
            if self.admit(rec.id, rec.category, rec.job, rec.node, when):
                self.book.release(rec, when, f"{when:.3f} released: the storm of {kind} {name} is over")

    def _scopes(self, job: str | None, node: str | None) -> list[str]:
        """What an incident counts against: its job, and the node whose reports raised it: the node it
        names, or, naming none, the one node all its job's ranks run on. Never another node of its
        job: a storm of one node must not hold back what the others report."""
        if node is None and job is not None and (watch := self.state.jobs.get(job)) is not None:
            nodes = {rank.node for rank in watch.ranks.values()}
            node = nodes.pop() if len(nodes) == 1 else None
        return ([f"job:{job}"] if job else []) + ([f"node:{node}"] if node else [])

    def _limit(self, key: str) -> int:
        return self.config.job_incidents if key.startswith("job:") else self.config.node_incidents

    def _sweep(self, since: float) -> None:
        """Forget scopes with nothing left in the window (they would count nothing anyway)."""
        rates = self.state.rates
        for key in [key for key, times in rates.items() if not times or times[-1] <= since]:
            del rates[key]
        self._sweep_at = max(SWEEP_AT, 2 * len(rates))


def _split(key: str) -> tuple[str, str]:
    kind, _, name = key.partition(":")
    return kind, name
