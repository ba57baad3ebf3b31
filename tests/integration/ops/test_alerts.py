"""The alert bridge through a real broker: a real Alertmanager shows and resolves the alert; PagerDuty
and webhook endpoints that are down get every event once they are back, and offsets wait for them."""

from __future__ import annotations

import json
import logging
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, TopicPartition

from trainmedic.bus.producer import EventProducer
from trainmedic.bus.reader import NOW, TopicReader
from trainmedic.bus.settings import KafkaSettings
from trainmedic.ops.alerts.bridge import AlertBridge
from trainmedic.ops.alerts.config import AlertBridgeConfig, RetryConfig
from trainmedic.schemas import Incident, IncidentStatus, RecoveryPlanned

pytestmark = pytest.mark.kafka
FAST = RetryConfig(initial_s=0.05, factor=2, max_s=0.2)
SECRET = "R0UT1NG-KEY-not-for-logs"


def incident(iid: str, severity: str, status: str = "open", *, ts: float | None = None) -> Incident:
    now = time.time() if ts is None else ts
    action = {"SEV1": "reconfigure", "SEV2": "restart", "SEV3": "reattempt", "WARN": "alert"}[severity]
    return Incident(ts=now, first_ts=now - 2.0, id=iid, status=IncidentStatus(status), category="node_lost",
                    severity=severity, action=action, job="llm", node="n02",
                    evidence=("no heartbeat for 6s",))


def produce(kafka: KafkaSettings, *events: Incident) -> None:
    with EventProducer(kafka) as producer:
        for event in events:
            producer.send(kafka.topics.incidents, event, key=event.job)


def step_until(bridge: AlertBridge, done, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "the bridge did not get there in time"
        bridge.step(0.1)


def active_alerts(url: str) -> list[dict]:
    with urllib.request.urlopen(f"{url}/api/v2/alerts?active=true", timeout=5) as response:
        return json.load(response)


def committed(kafka: KafkaSettings, group: str) -> int:
    """Messages the group has committed past, over all partitions of the incidents topic."""
    client = Consumer(kafka.client_config(**{"group.id": group}))
    try:
        parts = [TopicPartition(kafka.topics.incidents, p) for p in range(2)]
        return sum(max(0, tp.offset) for tp in client.committed(parts, timeout=10))
    finally:
        client.close()


def test_an_alert_appears_in_alertmanager_and_resolves(kafka: KafkaSettings, group_id: str,
                                                       alertmanager: str) -> None:
    config = AlertBridgeConfig(alertmanager={"url": alertmanager}, retry=FAST, group_id=group_id)
    bridge = AlertBridge(kafka, config)
    bridge.start()
    try:
        produce(kafka, incident("node_lost-1", "SEV3"))
        step_until(bridge, lambda: bridge.book.backlog() == 0 and active_alerts(alertmanager))
        [alert] = active_alerts(alertmanager)
        assert alert["labels"] == {"alertname": "trainmedic_node_lost", "severity": "SEV3",
                                   "category": "node_lost", "incident_id": "node_lost-1", "job": "llm",
                                   "node": "n02"}
        assert alert["annotations"]["evidence"] == "no heartbeat for 6s"
        assert alert["status"]["state"] == "active"

        produce(kafka, incident("node_lost-1", "SEV3", "resolved"))
        step_until(bridge, lambda: not active_alerts(alertmanager))
    finally:
        bridge.close()
    with TopicReader(kafka, [kafka.topics.alerts], end=NOW, validate=True) as audit:
        records = [r.event for batch in audit.batches() for r in batch]
    assert [(r.incident_id, r.sink, r.status, r.outcome) for r in records] == [
        ("node_lost-1", "alertmanager", "open", "delivered"),
        ("node_lost-1", "alertmanager", "resolved", "delivered")]


def test_down_endpoints_delay_alerts_and_lose_none(kafka: KafkaSettings, group_id: str, endpoint,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    config = AlertBridgeConfig.model_validate({
        "pagerduty": {"url": f"{endpoint.url}/v2/enqueue", "routing_key": SECRET},
        "webhook": {"url": f"{endpoint.url}/hook/T0/B0/secret-path"}, "retry": FAST, "group_id": group_id,
    })
    # One partition (all keyed by job llm): the SEV3 routes to no configured sink, so only it may commit.
    events = [incident("sev3-b", "SEV3"), incident("sev1-a", "SEV1"), incident("sev2-c", "SEV2"),
              incident("sev1-a", "SEV1", "resolved")]
    endpoint.down.set()
    bridge = AlertBridge(kafka, config)
    bridge.start()
    try:
        produce(kafka, *events)
        step_until(bridge, lambda: endpoint.refused >= 10)  # down for a good while, retried with backoff
        assert endpoint.received == []
        assert bridge.book.backlog("pagerduty") == 3 and bridge.book.backlog("webhook") == 3
    finally:
        bridge.close()  # stopped while the endpoint is down: commits what is stored
    assert committed(kafka, group_id) == 1  # nothing past the SEV1 still owed

    endpoint.down.clear()
    bridge = AlertBridge(kafka, config)  # restarted: re-reads what was never delivered
    bridge.start()
    try:
        step_until(bridge, lambda: len(endpoint.received) == 6 and bridge.book.backlog() == 0)
    finally:
        bridge.close()
    assert committed(kafka, group_id) == len(events)
    pagerduty = [body for path, body in endpoint.received if path == "/v2/enqueue"]
    hooks = [body for path, body in endpoint.received if path.startswith("/hook/")]
    assert [(e["event_action"], e["dedup_key"]) for e in pagerduty] == [
        ("trigger", "sev1-a"), ("trigger", "sev2-c"), ("resolve", "sev1-a")]
    assert {e["routing_key"] for e in pagerduty} == {SECRET}
    assert pagerduty[0]["payload"]["severity"] == "critical"
    assert [h["dedup_key"] for h in hooks] == ["sev1-a:open", "sev2-c:open", "sev1-a:resolved"]
    assert all(h["text"] for h in hooks)
    assert SECRET not in caplog.text and "secret-path" not in caplog.text
    assert "retry in" in caplog.text and "backlog pagerduty 3" in caplog.text


def test_the_coordinators_escalations_alert_from_its_recovery_topic_and_forged_ones_do_not(
        kafka: KafkaSettings, group_id: str, endpoint) -> None:
    """The bridge reads the detector's incidents and the coordinator's recovery log: an escalation
    there pages (its plans and outcomes do not), a coordinator event forged on incidents is refused."""
    config = AlertBridgeConfig.model_validate({"webhook": {"url": f"{endpoint.url}/hook"}, "retry": FAST,
                                               "group_id": group_id})
    escalation = Incident.model_validate({**incident("recovery_failed-llm", "SEV1").model_dump(),
                                          "category": "recovery_failed", "action": "alert", "node": None})
    plan = RecoveryPlanned(ts=time.time(), plan_id="p1", job="llm", kind="restart", generation=1,
                           nodes=("n01", "n02"))
    with EventProducer(kafka) as producer:
        producer.send(kafka.topics.recovery, plan, key="llm")
        producer.send(kafka.topics.recovery, escalation, key="llm")
        producer.send(kafka.topics.incidents, plan.model_copy(update={"plan_id": "p2"}), key="llm")
    produce(kafka, incident("sev2-d", "SEV2"))
    bridge = AlertBridge(kafka, config)
    bridge.start()
    try:
        step_until(bridge, lambda: len(endpoint.received) == 2 and bridge.book.backlog() == 0)
    finally:
        bridge.close()
    assert sorted(body["dedup_key"] for _, body in endpoint.received) == [
        "recovery_failed-llm:open", "sev2-d:open"]
    assert set(bridge.open) == {"recovery_failed-llm", "sev2-d"}
    with TopicReader(kafka, [kafka.topics.dlq], end=NOW, validate=True) as dlq:
        letters = [r.event for batch in dlq.batches() for r in batch]
    assert [(letter.source_topic, letter.reason) for letter in letters] == [
        (kafka.topics.incidents, "a recovery_planned belongs on the recovery topic, never on incidents")]
