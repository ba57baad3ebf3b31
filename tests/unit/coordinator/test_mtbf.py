"""The cluster's mean time between failures, the planner's horizon."""

from __future__ import annotations

import pytest

from tests.unit.coordinator.world import CONFIG, incident, submitted
from trainmedic.recovery.coordinator.core import ClusterState, CoordinatorConfig, apply, estimate_mtbf

HOUR = 3600.0


def state_with(*events, prior_s: float = 3 * HOUR, weight: float = 1.0) -> ClusterState:
    config = CoordinatorConfig(mtbf_prior_s=prior_s, mtbf_prior_weight=weight, nodes=CONFIG.nodes)
    state = ClusterState.initial(config)
    for event in events:
        apply(state, event)
    return state


def test_with_no_history_the_prior_is_the_estimate() -> None:
    assert estimate_mtbf(state_with(), now=1e9) == 3 * HOUR
    assert estimate_mtbf(state_with(submitted(ts=100.0)), now=100.0) == 3 * HOUR


def test_observed_time_over_sev1_and_sev2_failures_outweighs_the_prior() -> None:
    failures = [incident(f"f{i}", "SEV1" if i % 2 else "SEV2", node="n1", ts=HOUR * (i + 1))
                for i in range(5)]
    noise = [incident("s3", "SEV3", node="n1", ts=HOUR), incident("w", "WARN", node="n1", ts=HOUR),
             failures[0], incident("f0", "SEV2", node="n1", ts=2 * HOUR, status="resolved")]
    state = state_with(submitted(ts=0.0), *failures, *noise)
    assert estimate_mtbf(state, now=10 * HOUR) == pytest.approx((3 * HOUR + 10 * HOUR) / (1 + 5))


def test_a_quiet_cluster_expects_longer_between_failures() -> None:
    state = state_with(submitted(ts=0.0))
    assert estimate_mtbf(state, now=48 * HOUR) == pytest.approx(51 * HOUR)


def test_the_prior_weight_says_how_much_the_prior_counts() -> None:
    state = state_with(submitted(ts=0.0), incident("f", "SEV1", node="n1", ts=10.0), weight=4.0)
    assert estimate_mtbf(state, now=HOUR) == pytest.approx((12 * HOUR + HOUR) / 5)
