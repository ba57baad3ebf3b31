"""What `job list` and `job status` say a job's state is: the fold's; `rejected` when the coordinator
refused its submission; `recovering (backoff …)` while a restart of it waits out its backoff. Pure:
the folded log and `now` in (docs/run.md#trainmedic-job-status-job)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from trainmedic.recovery.coordinator.core.blame import blames_node, signature
from trainmedic.recovery.coordinator.core.limits import restart_due
from trainmedic.recovery.coordinator.core.state import ClusterState, Job, JobState
from trainmedic.schemas.incident import Severity
from trainmedic.schemas.jobs import JobSpec, JobSubmitted
from trainmedic.schemas.recovery import JobEnded


@dataclass(frozen=True)
class JobLog:
    """The log folded as the coordinator folds it (`state`), and the submissions it rejected that
    stand: job id -> the spec and why (the coordinator's `job_ended` rejected)."""

    state: ClusterState
    rejected: dict[str, tuple[JobSpec, str]]

    @classmethod
    def of(cls, state: ClusterState, events: Iterable[object]) -> JobLog:
        """`state` folded from `events`, with the rejections among them that no later job of the id
        overtook (a fold without the coordinator's config takes what it refused, but never starts it)."""
        specs, why = {}, {}
        for event in events:
            if isinstance(event, JobSubmitted):
                specs[event.job.id] = event.job
            elif isinstance(event, JobEnded) and event.state == "rejected":
                why[event.job] = event.reason
        return cls(state, {job: (specs[job], reason) for job, reason in why.items()
                           if job in specs and not started(state, job)})

    def displayed(self, job_id: str) -> Job | None:
        """The job as shown: the fold's, or a rejected one as submitted, ended with why."""
        if job_id in self.rejected:
            spec, why = self.rejected[job_id]
            return Job(spec, end_reason=why)
        return self.state.jobs.get(job_id)

    def jobs(self) -> list[Job]:
        """Every job shown: the fold's in submission order, then the rejected ones."""
        return [self.displayed(job) for job in {**dict.fromkeys(self.state.jobs), **self.rejected}]


def started(state: ClusterState, job_id: str) -> bool:
    """The fold holds a job of the id that got further than its submission."""
    job = state.jobs.get(job_id)
    return job is not None and (job.state is not JobState.SUBMITTED or job.plan is not None
                                or job.not_started is not None)


def backoff_until(state: ClusterState, job: Job, now: float) -> float | None:
    """When the coordinator may next restart `job`, while it backs off: a failure of the job waits
    undecided (pending) and `restart_due` is later than `now`; None otherwise."""
    if job.over or job.state.in_flight or not job.nodes:
        return None
    due = [restart_due(state, job, signature(incident), now) for incident_id in state.pending
           if (incident := state.incidents.get(incident_id)) is not None and _restarts(state, job, incident)]
    return min(due) if due and min(due) > now else None


def _restarts(state: ClusterState, job: Job, incident) -> bool:
    """The incident is one the coordinator answers with a restart of `job` (decide.py)."""
    mine = incident.job == job.spec.id or (incident.job is None and incident.node in job.nodes)
    if incident.severity is Severity.SEV1:
        return mine and incident.node is not None and not blames_node(state, incident)
    return mine and incident.severity is Severity.SEV2


def state_text(log: JobLog, job: Job, now: float, long: bool = True) -> str:
    """The job's state in words: `rejected`, `recovering (backoff 110 s, next attempt at 12:03:10 UTC)`
    (`long`; else without the time), or the fold's state."""
    if job.spec.id in log.rejected:
        return "rejected"
    until = backoff_until(log.state, job, now)
    if until is None:
        return job.state.value
    at = f", next attempt at {time.strftime('%H:%M:%S', time.gmtime(until))} UTC" if long else ""
    return f"recovering (backoff {until - now:.0f} s{at})"
