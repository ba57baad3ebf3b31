"""The coordinator's pure core over plain values, no Kafka: `ClusterState.initial(config)`,
`apply(state, event)` (the fold), `decide` and `tick` (pure decisions), and the steps `react`,
`settle`, `catch_up` (decide and fold in one, as the adapter does) (docs/coordinator.md).
"""


from trainmedic.recovery.coordinator.core.config import CoordinatorConfig, NodeConfig
from trainmedic.recovery.coordinator.core.decide import decide
from trainmedic.recovery.coordinator.core.fold import apply
from trainmedic.recovery.coordinator.core.planning import estimate_mtbf, plan_request
from trainmedic.recovery.coordinator.core.state import (
    ClusterState,
    CommandStatus,
    IllegalTransition,
    JobState,
)
from trainmedic.recovery.coordinator.core.steps import catch_up, react, settle, tick

__all__ = [
    "ClusterState", "CommandStatus", "CoordinatorConfig", "IllegalTransition", "JobState", "NodeConfig",
    "apply", "catch_up", "decide", "estimate_mtbf", "plan_request", "react", "settle", "tick",
]
