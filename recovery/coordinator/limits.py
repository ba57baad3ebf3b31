"""The blast-radius limits, computed from the state and `now`: the isolation cap and restart backoff.

Isolation: at most max(1, `isolation_cap` × nodes) nodes per rolling `isolation_window_s`
(Kubernetes' node lifecycle controller, Cluster API's maxUnhealthy). Restarts of a job: the
first within `restart_window_s` goes at once, the n-th waits `restart_backoff_s[n - 2]` after the
previous one (the last wait repeats), and after
`max_restarts` the coordinator gives up on the job.
"""

from __future__ import annotations

import math

from recovery.coordinator.state import ClusterState, Job


def isolation_cap(state: ClusterState) -> int:
    """How many nodes may be isolated automatically per window: a share of the cluster, at least one."""
    return max(1, math.floor(state.config.isolation_cap * len(state.nodes)))


def isolations_left(state: ClusterState, now: float) -> int:
    """Isolations still allowed in the window that ends at `now`."""
    since = now - state.config.isolation_window_s
    recent = sum(1 for node in state.nodes.values()
                 if node.isolated_ts is not None and node.isolated_ts > since)
    return max(0, isolation_cap(state) - recent)


def recent_restarts(state: ClusterState, job: Job, now: float) -> tuple[float, ...]:
    since = now - state.config.restart_window_s
    return tuple(ts for ts in job.restarts if ts > since)


def exhausted(state: ClusterState, job: Job, now: float) -> bool:
    """The job has had `max_restarts` restarts within the window: the coordinator gives up."""
    return len(recent_restarts(state, job, now)) >= state.config.max_restarts


def restart_due(state: ClusterState, job: Job, now: float) -> float:
    """When the job's next restart may go out: its backoff after the previous restart."""
    recent = recent_restarts(state, job, now)
    if not recent:
        return now
    backoff = state.config.restart_backoff_s
    return recent[-1] + backoff[min(len(recent) - 1, len(backoff) - 1)]
