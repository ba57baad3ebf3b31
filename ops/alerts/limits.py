"""How many incidents the alert bridge posts per node and per job (docs/alerts.md, "Rate limits").

At most `posts_per_node` incidents of one node and `posts_per_job` of one job are posted (to every sink
each is routed to) within `posts_window_s` of the first; the others are held back: not posted, nor their
resolutions. When the window is over, one summary (`alerts_held`, action `alert`, the severity of the worst
held back) says how many were held and of which categories; it is resolved one window later (a page that
nothing resolves stays open for ever). Never held: the coordinator's own incidents (read from the
`recovery` topic: its escalations, `health_check_failed`, `recovery_failed`, are its decisions, not job
reports; the bridge says so with `trusted`), node evidence (the taxonomy's `Source.NODE`: hardware faults,
`node_lost`, link flaps) and the detector's `storm`: a flood of job reports must not hide a node's real
failure, and the storm is what tells a person. An incident once posted is never held afterwards (a copy
delivered again is posted again, and counted once; its resolution is posted). Pure: time is passed in
(the bridge's clock: posts are wall-time work).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field

from trainmedic.ops.alerts.config import PostLimits
from trainmedic.schemas.incident import Incident, IncidentStatus, Severity
from trainmedic.streams.core.taxonomy import CATEGORIES, Source

HELD_IDS = 10_000  # incidents held back remembered (their resolutions are held too), the oldest forgotten
POSTED_IDS = 10_000  # incidents posted remembered (never held afterwards), the oldest forgotten
NEVER_HELD = frozenset({"storm"} | {name for name, c in CATEGORIES.items() if c.source is Source.NODE})
_ORDER = (Severity.SEV1, Severity.SEV2, Severity.SEV3, Severity.WARN)


@dataclass
class Window:
    """One node's or job's posts since `start`, and what was held back."""

    start: float
    posted: int = 0
    held: Counter = field(default_factory=Counter)  # category -> incidents held back
    worst: Severity = Severity.WARN


class PostLimiter:
    def __init__(self, config: PostLimits) -> None:
        self.config = config
        self.windows: dict[tuple[str, str], Window] = {}  # ("node" or "job", its name) -> its window
        self._held: dict[str, str] = {}  # incident id -> the scope that held it back
        self._posted: dict[str, None] = {}  # incident ids posted (an ordered set, the oldest first)
        self._ended: list[Incident] = []  # summaries of windows a new one replaced before `due`
        self._summaries: list[Incident] = []  # summaries posted open, resolved a window after, oldest first

    def admit(self, incident: Incident, now: float, trusted: bool = False) -> str | None:
        """None: post it (counted once); else the scope ("node", "job") whose limit holds it back.
        `trusted`: the coordinator's own (read from `recovery`), never held nor counted."""
        iid = incident.id
        if trusted or iid in self._posted:
            return None
        if incident.status is not IncidentStatus.OPEN or iid in self._held:
            return self._held.get(iid)  # a resolution, or a copy of one held: as its opening was
        scopes = [(kind, name) for kind, name in (("node", incident.node), ("job", incident.job)) if name]
        if incident.category in NEVER_HELD or not scopes:
            return None
        windows = [self._window(scope, now) for scope in scopes]
        full = [scope for scope, window in zip(scopes, windows, strict=True)
                if window.posted >= self._limit(scope[0])]
        if not full:
            for window in windows:
                window.posted += 1
            _remember(self._posted, iid, None, POSTED_IDS)
            return None
        for scope in full:
            window = self.windows[scope]
            window.held[incident.category] += 1
            window.worst = min(window.worst, incident.severity, key=_ORDER.index)
        _remember(self._held, iid, full[0][0], HELD_IDS)
        return full[0][0]

    def holds(self, incident_id: str) -> bool:
        """Whether this incident was held back (an open alert not to be re-posted either)."""
        return incident_id in self._held

    def due(self, now: float) -> list[Incident]:
        """The summaries of the windows over by `now` that held something back (those windows end), and
        the resolutions of the summaries posted a window ago or more."""
        out, self._ended = self._ended, []
        for scope, window in list(self.windows.items()):
            if now >= window.start + self.config.posts_window_s:
                del self.windows[scope]
                if window.held:
                    out.append(self._summary(scope, window, now))
        old = self._summaries
        while old and now >= old[0].ts + self.config.posts_window_s:
            summary = old.pop(0)
            out.append(summary.model_copy(update={
                "ts": now, "status": IncidentStatus.RESOLVED,
                "evidence": (*summary.evidence, f"{now:.3f} resolved: posted {summary.ts:.3f}, a window "
                                                f"({self.config.posts_window_s:g}s) ago")}))
        return out

    def _window(self, scope: tuple[str, str], now: float) -> Window:
        window = self.windows.get(scope)
        if window is not None and now >= window.start + self.config.posts_window_s:
            if window.held:
                self._ended.append(self._summary(scope, window, now))
            window = None
        if window is None:
            window = self.windows[scope] = Window(now)
        return window

    def _limit(self, kind: str) -> int:
        return self.config.posts_per_node if kind == "node" else self.config.posts_per_job

    def _summary(self, scope: tuple[str, str], window: Window, now: float) -> Incident:
        kind, name = scope
        held = sum(window.held.values())
        what = ", ".join(f"{category} x{n}" for category, n in sorted(window.held.items()))
        key = f"{kind}\x00{name}\x00{window.start!r}".encode()
        summary = Incident(
            ts=now, id=f"alerts_held-{hashlib.sha1(key).hexdigest()[:12]}", status=IncidentStatus.OPEN,
            category="alerts_held", severity=window.worst, action="alert", first_ts=window.start,
            node=name if kind == "node" else None, job=name if kind == "job" else None,
            evidence=(f"{now:.3f} {held} incidents of {kind} {name} held back since {window.start:.3f}: "
                      f"{window.posted} posted, the limit is {self._limit(kind)} per "
                      f"{self.config.posts_window_s:g}s (posts_per_{kind})",
                      f"held back: {what}; `trainmedic incidents` lists them all"))
        self._summaries.append(summary)
        return summary


def _remember(ids: dict, iid: str, value: object, cap: int) -> None:
    ids[iid] = value
    while len(ids) > cap:
        del ids[next(iter(ids))]
