"""The blast-radius limits, computed from the state and `now`: the isolation cap and restart backoff
(docs/coordinator.md, "Blast-radius limits and blame").
"""

from __future__ import annotations

import math

from trainmedic.recovery.coordinator.core.blame import signature
from trainmedic.recovery.coordinator.core.state import ClusterState, Job
from trainmedic.schemas.incident import Incident


def isolation_cap(state: ClusterState) -> int:
    """How many nodes may be isolated automatically per window: a share of the cluster, at least one."""
    return max(1, math.floor(state.config.isolation_cap * len(state.nodes)))


def isolations_left(state: ClusterState, now: float) -> int:
    """Isolations still allowed in the window that ends at `now`. Every isolation decided counts,
    also one that an uncordon or re-admission has ended since: returning a node restores no budget."""
    since = now - state.config.isolation_window_s
    recent = sum(1 for node in state.nodes.values() for ts, _ in node.isolations if ts > since)
    return max(0, isolation_cap(state) - recent)


def policy(state: ClusterState, job: Job) -> tuple[int, tuple[float, ...], float]:
    """(max_restarts, backoff_s, window_s) for the job: its spec's `restart`, else the config's."""
    config, asked = state.config, job.spec.restart
    return (config.max_restarts if asked.max_restarts is None else asked.max_restarts,
            config.restart_backoff_s if asked.backoff_s is None else asked.backoff_s,
            config.restart_window_s if asked.window_s is None else asked.window_s)


def note_progress(state: ClusterState, job: Job, incident: Incident) -> None:
    """Fold how far the job's failed generation got (`Incident.progress`): whether the job ever
    stepped, and from when it ran healthily long enough to get its restart budget back."""
    progress = incident.progress
    if progress is None:
        return
    job.stepped = progress.steps > 0 or bool(job.stepped)
    since = progress.since
    if since is not None and incident.first_ts - since >= state.config.healthy_run_s:
        job.healthy_since = since if job.healthy_since is None else max(job.healthy_since, since)


def recent_restarts(state: ClusterState, job: Job, failure: str, now: float) -> tuple[float, ...]:
    """When the job restarted within the window for a failure with signature `failure` (a restart
    whose incident is not known yet counts: the limits err on the side of doing less), and not
    before a generation that ran healthily (`note_progress`)."""
    since = now - policy(state, job)[2]
    if job.healthy_since is not None:
        since = max(since, job.healthy_since)
    return tuple(ts for ts, incident_id in job.restarts
                 if ts > since and signature(state.incidents.get(incident_id)) in (failure, None))


def give_up_reason(state: ClusterState, job: Job, failure: str, now: float) -> str | None:
    """Why the coordinator gives up on the job for this failure, or None while restarts are left:
    a job that never completed a step has `restarts_before_first_step`; any other, `max_restarts`
    for one failure within the window."""
    max_restarts, _, window_s = policy(state, job)
    name = job.spec.id
    if job.stepped is False:
        allowed = min(max_restarts, state.config.restarts_before_first_step)
        if len(job.restarts) >= allowed:
            return (f"job {name} never completed a step, {_restarts(len(job.restarts))} included: a start "
                    f"that cannot work is not healed by waiting; the coordinator stops retrying it, fix "
                    f"the cause (its last error is in the evidence and in `trainmedic job status {name}`)")
        return None
    if len(recent_restarts(state, job, failure, now)) >= max_restarts:
        if max_restarts == 0:
            return (f"job {name} allows no restart (max_restarts 0): the coordinator does not retry "
                    f"{failure}, a person decides")
        return (f"{_restarts(max_restarts)} of {name} for {failure} within {window_s:g} s did not "
                f"cure it: the failure follows the job; the coordinator stops retrying it, a person decides")
    return None


def _restarts(count: int) -> str:
    return f"{count} restart" if count == 1 else f"{count} restarts"


def restart_due(state: ClusterState, job: Job, failure: str, now: float) -> float:
    """When the job's next restart for this failure may go out: its backoff after the previous one."""
    recent = recent_restarts(state, job, failure, now)
    if not recent:
        return now
    backoff = policy(state, job)[1]
    return recent[-1] + backoff[min(len(recent) - 1, len(backoff) - 1)]
