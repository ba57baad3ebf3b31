"""The recovery coordinator: a pure core over plain values, and its Kafka adapter.

Core: `ClusterState.initial(config)`, `apply(state, event)` (the fold), `decide(state, event,
now)` and `tick(state, now)` (pure decisions), and `react`, `settle`, `catch_up` (decide and
fold in one step, as the adapter does). The adapter is `recovery.coordinator.service`; this
package imports no Kafka.
"""

from recovery.coordinator.config import CoordinatorConfig, NodeConfig
from recovery.coordinator.decide import decide
from recovery.coordinator.fold import apply
from recovery.coordinator.planning import estimate_mtbf, plan_request
from recovery.coordinator.state import ClusterState, CommandStatus, IllegalTransition, JobState
from recovery.coordinator.timers import catch_up, react, settle, tick

__all__ = [
    "ClusterState", "CommandStatus", "CoordinatorConfig", "IllegalTransition", "JobState", "NodeConfig",
    "apply", "catch_up", "decide", "estimate_mtbf", "plan_request", "react", "settle", "tick",
]
