"""The blast-radius limits, computed from the state and `now`: the isolation cap and restart backoff
(docs/coordinator.md, "Blast-radius limits and blame").
"""

from __future__ import annotations

import math

from trainmedic.recovery.coordinator.core.blame import signature
from trainmedic.recovery.coordinator.core.state import ClusterState, Job


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


def recent_restarts(state: ClusterState, job: Job, failure: str, now: float) -> tuple[float, ...]:
    """When the job restarted within the window for a failure with signature `failure` (a restart
    whose incident is not known yet counts: the limits err on the side of doing less)."""
    since = now - policy(state, job)[2]
    return tuple(ts for ts, incident_id in job.restarts
                 if ts > since and signature(state.incidents.get(incident_id)) in (failure, None))


def exhausted(state: ClusterState, job: Job, failure: str, now: float) -> bool:
    """The job has had `max_restarts` restarts for this failure within the window: give up."""
    return len(recent_restarts(state, job, failure, now)) >= policy(state, job)[0]


def restart_due(state: ClusterState, job: Job, failure: str, now: float) -> float:
    """When the job's next restart for this failure may go out: its backoff after the previous one."""
    recent = recent_restarts(state, job, failure, now)
    if not recent:
        return now
    backoff = policy(state, job)[1]
    return recent[-1] + backoff[min(len(recent) - 1, len(backoff) - 1)]
