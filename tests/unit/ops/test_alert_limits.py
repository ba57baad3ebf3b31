"""The alert bridge's rate limits (issue 45, point 2; ops/alerts/limits.py): the red-team forgery gave 401
alert posts in 45 s. At most posts_per_node / posts_per_job incidents of one node or job are posted per
window, then one summary says how many were held back; node evidence and the detector's storm are never
held. Each test fails on the code before the limits."""

from __future__ import annotations

from tests.unit.ops.test_alert_core import CONFIG
from tests.unit.ops.test_poison import SETTINGS, TOPIC
from trainmedic.bus.message import RawMessage
from trainmedic.ops.alerts.bridge import AlertBridge
from trainmedic.ops.alerts.config import AlertBridgeConfig, PostLimits
from trainmedic.schemas import Incident, encode

T0 = 1_700_000_000.0


def hang(n: int, status: str = "open", node: str = "n9", severity: str = "SEV1") -> Incident:
    action = {"SEV1": "reconfigure", "SEV2": "restart"}[severity]
    return Incident(ts=T0 + n * 0.2, first_ts=T0 + n * 0.2 - 1, id=f"hang-{n:03d}", status=status,
                    category="hang", severity=severity, action=action, job=f"invented-{n:03d}", node=node,
                    evidence=("no step",))


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def feed(bridge: AlertBridge, incidents: list[Incident], clock: Clock) -> list[Incident]:
    """Admit each incident 0.2 s apart (offsets in order); what the sinks' queues then hold, per sink once
    (every sink here gets SEV1 and SEV2)."""
    for n, incident in enumerate(incidents):
        clock.now = max(clock.now, incident.ts)
        assert bridge.admit(RawMessage(TOPIC, 0, n, 0, b"k", encode(incident))) is None
    bridge.summarize()
    return [delivery.incident for delivery in bridge.book.queues["pagerduty"]]


def test_200_invented_hangs_on_one_node_post_the_limit_and_then_one_summary() -> None:
    clock = Clock()
    bridge = AlertBridge(SETTINGS, CONFIG, clock=clock)
    queued = feed(bridge, [hang(n) for n in range(200)], clock)  # 40 s of them, one window
    assert [i.id for i in queued] == [f"hang-{n:03d}" for n in range(10)]
    for sink, queue in bridge.book.queues.items():
        assert len(queue) == 10
        for _ in range(10):
            bridge.book.done(sink)
    assert bridge.book.offsets.committable() == {(TOPIC, 0): 200}  # the held ones were done at once
    clock.now = T0 + 60.0
    queued = feed(bridge, [], clock)
    summary = queued[-1]
    assert (summary.category, summary.node, summary.severity.value, summary.action.value) == (
        "alerts_held", "n9", "SEV1", "alert")
    assert summary.evidence[0].endswith("190 incidents of node n9 held back since 1700000000.000: 10 posted, "
                                        "the limit is 10 per 60s (posts_per_node)")
    assert "hang x190" in summary.evidence[1]
    assert len(queued) == 1  # and nothing else: 10 posted, one summary, not 200 (x3 sinks)


def test_a_held_incidents_resolution_is_held_a_posted_ones_is_posted() -> None:
    clock = Clock()
    bridge = AlertBridge(SETTINGS, CONFIG, clock=clock)
    queued = feed(bridge, [hang(n) for n in range(12)] + [hang(0, "resolved"), hang(11, "resolved")], clock)
    assert [(i.id, i.status.value) for i in queued][-1] == ("hang-000", "resolved")
    assert len(queued) == 11
    assert bridge.limits.holds("hang-011") and not bridge.limits.holds("hang-000")


def test_node_evidence_and_the_storm_are_never_held() -> None:
    """A real Xid 79 on the flooded node, and the detector's storm, reach the sinks past the limit."""
    clock = Clock()
    bridge = AlertBridge(SETTINGS, CONFIG, clock=clock)
    lost = Incident(ts=T0 + 30, first_ts=T0 + 30, id="gpu_lost-1", status="open", category="gpu_lost",
                    severity="SEV1", action="reconfigure", node="n9", evidence=("gpu 1: Xid 79",))
    storm = Incident(ts=T0 + 31, first_ts=T0 + 1, id="storm-1", status="open", category="storm",
                     severity="SEV2", action="alert", node="n9", evidence=("10 incidents",))
    queued = feed(bridge, [hang(n) for n in range(20)] + [lost, storm], clock)
    assert [i.id for i in queued][-2:] == ["gpu_lost-1", "storm-1"]


def test_the_limit_is_per_job_too_and_configurable() -> None:
    clock = Clock()
    config = AlertBridgeConfig.model_validate({**CONFIG.model_dump(), "pagerduty": {"routing_key": "k"},
                                               "webhook": {"url": "https://hooks.example/x"},
                                               "limits": {"posts_per_job": 2, "posts_window_s": 10}})
    bridge = AlertBridge(SETTINGS, config, clock=clock)
    same_job = [hang(n, node=f"n{n}").model_copy(update={"job": "llm"}) for n in range(5)]
    assert [i.id for i in feed(bridge, same_job, clock)] == ["hang-000", "hang-001"]
    assert config.limits == PostLimits(posts_per_job=2, posts_window_s=10)


def test_the_coordinators_escalations_are_never_held() -> None:
    """After 12 forged hangs on n9, the coordinator's own health_check_failed and recovery_failed for n9
    (read from the `recovery` topic) are still posted: the bridge never holds what the coordinator
    decided, whatever its category."""
    clock = Clock()
    bridge = AlertBridge(SETTINGS, CONFIG, clock=clock)
    feed(bridge, [hang(n) for n in range(12)], clock)
    escalations = [
        Incident(ts=T0 + 5, first_ts=T0 + 5, id="esc-abc", status="open", category="health_check_failed",
                 severity="SEV1", action="reconfigure", node="n9", evidence=("failed",)),
        Incident(ts=T0 + 5, first_ts=T0 + 5, id="esc-def", status="open", category="recovery_failed",
                 severity="SEV1", action="alert", node="n9", job="invented-001", evidence=("gave up",))]
    for n, incident in enumerate(escalations):
        assert bridge.admit(RawMessage(SETTINGS.topics.recovery, 0, n, 0, b"k", encode(incident))) is None
    queued = [delivery.incident.id for delivery in bridge.book.queues["pagerduty"]]
    assert queued[-2:] == ["esc-abc", "esc-def"] and len(queued) == 12
    assert not bridge.limits.holds("esc-abc") and bridge.limits.windows[("node", "n9")].posted == 10


def test_a_posted_incident_delivered_again_is_never_held_nor_its_resolution() -> None:
    """A copy of a posted incident delivered again (a re-read after a restart of the consumer) when its
    node's window is full is posted again (the sinks dedupe it), counted once; its resolution is posted,
    so its page closes."""
    clock = Clock()
    bridge = AlertBridge(SETTINGS, CONFIG, clock=clock)
    queued = feed(bridge, [hang(n) for n in range(10)] + [hang(0), hang(10), hang(0, "resolved")], clock)
    assert [(i.id, i.status.value) for i in queued][-2:] == [("hang-000", "open"), ("hang-000", "resolved")]
    assert not bridge.limits.holds("hang-000") and bridge.limits.holds("hang-010")
    assert bridge.limits.windows[("node", "n9")].posted == 10
    assert sum(bridge.limits.windows[("node", "n9")].held.values()) == 1


def test_the_summary_is_resolved_a_window_after_it_was_posted() -> None:
    """`alerts_held` is posted open when its window ends and resolved one window later: no page stays
    open for ever."""
    clock = Clock()
    bridge = AlertBridge(SETTINGS, CONFIG, clock=clock)
    feed(bridge, [hang(n) for n in range(12)], clock)
    clock.now = T0 + 60.0
    [summary] = [i for i in feed(bridge, [], clock) if i.category == "alerts_held"]
    assert summary.status.value == "open"
    clock.now = T0 + 119.0
    assert [i.category for i in feed(bridge, [], clock)].count("alerts_held") == 1  # not yet
    clock.now = T0 + 120.0
    closing = [i for i in feed(bridge, [], clock) if i.category == "alerts_held"]
    assert [(i.id, i.status.value) for i in closing] == [(summary.id, "open"), (summary.id, "resolved")]
    assert closing[-1].evidence[-1].endswith("a window (60s) ago")
    clock.now = T0 + 300.0
    assert len([i for i in feed(bridge, [], clock) if i.category == "alerts_held"]) == 2  # once only
