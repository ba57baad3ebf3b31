"""The alert bridge's pure core: routing, payloads, the retry schedule and what may be committed."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from trainmedic.ops.alerts.config import AlertBridgeConfig, RetryConfig
from trainmedic.ops.alerts.delivery import DeliveryBook, OffsetTracker, backoff_s
from trainmedic.ops.alerts.http import Outcome, classify, redact
from trainmedic.ops.alerts.payloads import alertmanager_alert, pagerduty_event, route, webhook_message
from trainmedic.schemas import Incident

CONFIG = AlertBridgeConfig.model_validate({
    "alertmanager": {"url": "http://am:9093"}, "pagerduty": {"routing_key": "k"},
    "webhook": {"url": "https://hooks.example/T0/B0/xyz"}, "group_id": "trainmedic.alerts",
})


def incident(severity: str = "SEV1", status: str = "open", **extra) -> Incident:
    action = {"SEV1": "reconfigure", "SEV2": "restart", "SEV3": "reattempt", "WARN": "alert"}[severity]
    evidence = ("no heartbeat for 10s", "rank 3: gloo timeout")
    fields = {"job": "llm", "node": "n02", "evidence": evidence, **extra}
    return Incident(ts=1_700_000_010.0, first_ts=1_700_000_000.0, id="node_lost-abc", status=status,
                    category="node_lost", severity=severity, action=action, **fields)


@pytest.mark.parametrize(("severity", "sinks"), [
    ("SEV1", ["alertmanager", "pagerduty", "webhook"]), ("SEV2", ["alertmanager", "pagerduty", "webhook"]),
    ("SEV3", ["alertmanager"]), ("WARN", ["alertmanager"]),
])
def test_default_routing_pages_only_for_sev1_and_sev2(severity: str, sinks: list[str]) -> None:
    assert route(incident(severity), CONFIG) == sinks


def test_routing_is_configurable_per_sink() -> None:
    webhook = CONFIG.webhook.model_copy(update={"severities": ("WARN",)})
    config = CONFIG.model_copy(update={"webhook": webhook})
    assert route(incident("WARN"), config) == ["alertmanager", "webhook"]


def test_a_config_without_sinks_or_with_inverted_backoff_is_refused() -> None:
    with pytest.raises(ValidationError, match="no sink configured"):
        AlertBridgeConfig(group_id="g")
    with pytest.raises(ValidationError, match="max_s must be at least"):
        RetryConfig(initial_s=10, max_s=1)


def test_secrets_stay_out_of_the_config_repr() -> None:
    assert "xyz" not in repr(CONFIG) and "routing_key='k'" not in repr(CONFIG)


def test_alertmanager_alert_fires_until_4_resends_then_resolves_at_resolution() -> None:
    fired = alertmanager_alert(incident(), now=1_700_000_020.0, resend_s=60, generator_url="http://g/{id}")
    assert fired["labels"] == {"alertname": "trainmedic_node_lost", "severity": "SEV1",
                               "category": "node_lost", "incident_id": "node_lost-abc", "job": "llm",
                               "node": "n02"}
    assert fired["startsAt"] == "2023-11-14T22:13:20.000Z" and fired["endsAt"] == "2023-11-14T22:17:40.000Z"
    assert fired["annotations"]["evidence"] == "no heartbeat for 10s\nrank 3: gloo timeout"
    assert fired["annotations"]["action"].startswith("reconfigure")
    assert fired["generatorURL"] == "http://g/node_lost-abc"
    resolved = alertmanager_alert(incident(status="resolved"), now=1_700_009_999.0, resend_s=60,
                                  generator_url="")
    assert resolved["endsAt"] == "2023-11-14T22:13:30.000Z"


def test_alertmanager_labels_leave_out_a_missing_job_or_node() -> None:
    alert = alertmanager_alert(incident(job=None), now=0.0, resend_s=60, generator_url="")
    assert "job" not in alert["labels"] and alert["labels"]["node"] == "n02"


@pytest.mark.parametrize(("severity", "pd"), [("SEV1", "critical"), ("SEV2", "error"), ("SEV3", "warning"),
                                              ("WARN", "info")])
def test_pagerduty_trigger_maps_severity_and_dedups_by_incident(severity: str, pd: str) -> None:
    event = pagerduty_event(incident(severity), "key")
    assert (event["routing_key"], event["event_action"]) == ("key", "trigger")
    assert event["dedup_key"] == "node_lost-abc"
    assert event["payload"]["severity"] == pd and event["payload"]["source"] == "n02"
    assert event["payload"]["summary"].startswith(f"[{severity}] node_lost on n02 (job llm)")
    assert event["payload"]["custom_details"]["evidence"] == ["no heartbeat for 10s", "rank 3: gloo timeout"]


def test_pagerduty_resolve_has_the_same_dedup_key() -> None:
    event = pagerduty_event(incident(status="resolved"), "key")
    assert event == {"routing_key": "key", "event_action": "resolve", "dedup_key": "node_lost-abc"}


def test_webhook_has_a_slack_text_and_the_incident() -> None:
    body = webhook_message(incident())
    assert body["text"].startswith("*FIRING* `[SEV1] node_lost on n02 (job llm): no heartbeat for 10s")
    assert body["incident"]["id"] == "node_lost-abc" and body["dedup_key"] == "node_lost-abc:open"
    assert webhook_message(incident(status="resolved"))["text"].startswith("*RESOLVED*")


def test_backoff_doubles_up_to_the_cap() -> None:
    retry = RetryConfig(initial_s=1, factor=2, max_s=10)
    assert [backoff_s(retry, n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


@pytest.mark.parametrize(("status", "outcome"), [(200, "delivered"), (202, "delivered"), (400, "rejected"),
                                                 (404, "rejected"), (408, "retry"), (429, "retry"),
                                                 (500, "retry"), (503, "retry")])
def test_http_status_classes(status: int, outcome: str) -> None:
    assert classify(status) == Outcome(outcome)


def test_redact_keeps_only_scheme_host_and_port() -> None:
    assert redact("https://hooks.slack.com/services/T0/B0/secret?x=1") == "https://hooks.slack.com"
    assert redact("http://127.0.0.1:9093/api/v2/alerts") == "http://127.0.0.1:9093"


def test_offsets_never_pass_a_pending_message() -> None:
    tracker = OffsetTracker()
    tracker.add(("t", 0, 5), 2)
    tracker.add(("t", 0, 6), 0)
    tracker.add(("t", 0, 7), 1)
    tracker.add(("t", 1, 3), 0)
    assert tracker.committable() == {("t", 0): 5, ("t", 1): 4}
    tracker.done(("t", 0, 7))
    tracker.done(("t", 0, 5))
    assert tracker.committable()[("t", 0)] == 5  # one sink still owes offset 5
    tracker.done(("t", 0, 5))
    assert tracker.committable()[("t", 0)] == 8


def test_a_failed_head_blocks_its_sink_only_and_waits_its_backoff() -> None:
    book = DeliveryBook(["alertmanager", "pagerduty"], RetryConfig(initial_s=1, max_s=60), backlog_max=3)
    opened, resolved = incident(), incident(status="resolved")
    book.admit(opened, ("t", 0, 0), ["alertmanager", "pagerduty"])
    book.admit(resolved, ("t", 0, 1), ["alertmanager", "pagerduty"])
    assert book.full and book.backlog("pagerduty") == 2
    assert book.failed("pagerduty", now=100.0) == 1
    assert [s for s, _ in book.due(100.5)] == ["alertmanager"]
    book.done("alertmanager")
    assert [(s, d.incident.status) for s, d in book.due(100.5)] == [("alertmanager", "resolved")]
    assert book.offsets.committable()[("t", 0)] == 0
    # the trigger goes before the resolve that was queued behind it
    assert [(s, d.incident.status) for s, d in book.due(101.0)][1] == ("pagerduty", "open")
    book.done("alertmanager")
    book.done("pagerduty")
    book.done("pagerduty")
    assert book.offsets.committable()[("t", 0)] == 2 and not book.full


def test_people_read_evidence_times_as_clock_times_machines_get_them_as_written() -> None:
    lines = ("1700000000.400 rank 3 on n02: no telemetry since 1699999999.500", "affects job llm ranks [3]")
    stamped = incident(evidence=lines)
    fired = alertmanager_alert(stamped, now=1_700_000_020.0, resend_s=60, generator_url="http://g/{id}")
    readable = ["22:13:20.400 (+0.400s) rank 3 on n02: no telemetry since 22:13:19.500 (-0.500s)",
                "affects job llm ranks [3]"]
    assert fired["annotations"]["evidence"] == "\n".join(readable)
    assert fired["annotations"]["summary"] == f"[SEV1] node_lost on n02 (job llm): {readable[0]}"
    message = webhook_message(stamped)
    assert [line for line in message["text"].splitlines() if line.startswith("• ")] == [
        f"• `{line}`" for line in readable]
    assert message["incident"]["evidence"] == list(lines)
