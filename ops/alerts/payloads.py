"""What each sink is sent for an incident event, and which sinks get it. Pure: time is an argument.

Evidence, job ids and categories carry what ranks and telemetry sources wrote. Every field of every
payload has its control, bidi and invisible characters escaped (schemas/printable.py): a raw ESC in
the JSON `details` reached whoever printed them. In the Slack text, what the incident says is inline
code, its `&`, `<` and `>` escaped as Slack asks and its backticks shown as `ˋ`: no `<!channel>`,
`<@U…>` or `<http…|link>` mentions anyone or hides a link, a bare URL is no link, and no `*FIRING*`
in the evidence is bold.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from trainmedic.ops.alerts.config import AlertBridgeConfig
from trainmedic.ops.incidents.evidence import for_people
from trainmedic.schemas.incident import Incident, IncidentStatus, Severity
from trainmedic.schemas.printable import terminal_safe

PAGERDUTY_SEVERITY = {
    Severity.SEV1: "critical", Severity.SEV2: "error", Severity.SEV3: "warning", Severity.WARN: "info",
}
ACTION_WORDS = {
    "reconfigure": "node isolated, affected jobs re-planned without it",
    "restart": "job workers restarted in place",
    "reattempt": "job retried in place",
    "alert": "no automatic action: look into it",
}
PAGERDUTY_SUMMARY_MAX = 1024  # Events API v2: longer summaries are cut
PAGERDUTY_FIELD_MAX = 255  # source, component, group, class: short names in PagerDuty's UI
SLACK_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
CODE_BACKTICK = "\u02cb"  # ˋ, what a backtick in the incident's text shows as in Slack's inline code


def route(incident: Incident, config: AlertBridgeConfig) -> list[str]:
    """The sinks that get this incident, by its severity."""
    return [name for name, sink in config.sinks().items() if incident.severity in sink.severities]


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def slack_safe(text: str) -> str:
    """`text` as literal Slack mrkdwn: controls escaped, and `&`, `<`, `>` as Slack's entities."""
    return terminal_safe(text).translate(SLACK_ESCAPES)


def slack_code(text: str) -> str:
    """`text` as Slack inline code, shown as written: no link (a bare URL included), mention or
    formatting; a backtick, which would end the code, shown as `ˋ`."""
    return f"`{slack_safe(text).replace('`', CODE_BACKTICK)}`" if text else ""


def evidence(incident: Incident) -> list[str]:
    """The evidence lines for people: UTC clock times and offsets from the first evidence instead of
    unix seconds (`details` keeps them as the detector wrote them, for machines); controls escaped."""
    return [terminal_safe(for_people(line, incident.first_ts)) for line in incident.evidence]


def summary(incident: Incident) -> str:
    """One line: `[SEV1] node_lost on n02 (job llm): first evidence`, controls escaped."""
    where = " ".join(part for part in (f"on {incident.node}" if incident.node else "",
                                       f"(job {incident.job})" if incident.job else "") if part)
    head = f"[{incident.severity}] {incident.category}{' ' + where if where else ''}"
    first = evidence(incident)[0] if incident.evidence else ""
    return terminal_safe(f"{head}: {first}" if first else head)


def alertmanager_alert(incident: Incident, now: float, resend_s: float, generator_url: str) -> dict[str, Any]:
    """One PostableAlert. Open: ends 4 x resend_s from now unless re-posted (as Prometheus does);
    resolved: ends at the resolution time."""
    labels = {"alertname": terminal_safe(f"trainmedic_{incident.category}"),
              "severity": str(incident.severity), "category": terminal_safe(incident.category),
              "incident_id": terminal_safe(incident.id)}
    labels.update({k: terminal_safe(v) for k, v in (("job", incident.job), ("node", incident.node)) if v})
    resolved = incident.status is IncidentStatus.RESOLVED
    return {
        "labels": labels,
        "annotations": {"summary": summary(incident), "evidence": "\n".join(evidence(incident)),
                        "action": f"{incident.action}: {ACTION_WORDS.get(str(incident.action), '')}"},
        "startsAt": rfc3339(incident.first_ts),
        "endsAt": rfc3339(incident.ts if resolved else now + 4 * resend_s),
        "generatorURL": generator_url.format(id=incident.id),
    }


def pagerduty_event(incident: Incident, routing_key: str) -> dict[str, Any]:
    """An Events API v2 trigger (open) or resolve, deduplicated by the incident id."""
    resolved = incident.status is IncidentStatus.RESOLVED
    event: dict[str, Any] = {"routing_key": routing_key, "event_action": "resolve" if resolved else "trigger",
                             "dedup_key": incident.id}
    if not resolved:
        job = None if incident.job is None else _short(incident.job)
        event["payload"] = {
            "summary": summary(incident)[:PAGERDUTY_SUMMARY_MAX],
            "source": _short(incident.node or incident.job or "trainmedic"),
            "severity": PAGERDUTY_SEVERITY[incident.severity], "timestamp": rfc3339(incident.first_ts),
            "component": job, "class": _short(incident.category), "group": job,
            "custom_details": details(incident),
        }
        event["client"] = "trainmedic"
    return event


def _short(text: str) -> str:
    return terminal_safe(text)[:PAGERDUTY_FIELD_MAX]


def webhook_message(incident: Incident) -> dict[str, Any]:
    """A JSON body with a Slack-compatible `text` (everything the incident says in it taken
    literally), the dedup key and the whole incident."""
    resolved = incident.status is IncidentStatus.RESOLVED
    mark = "RESOLVED" if resolved else "FIRING"
    lines = [f"*{mark}* {slack_code(summary(incident))}",
             f"action: {incident.action}; incident {slack_code(incident.id)}"]
    lines += [f"• {slack_code(line)}" for line in evidence(incident)[:10]]
    return {"text": "\n".join(lines), "dedup_key": f"{incident.id}:{incident.status}",
            "status": "resolved" if resolved else "firing", "incident": details(incident)}


def details(incident: Incident) -> dict[str, Any]:
    """The whole incident for machines (unix times as the detector wrote them), its text escaped."""
    def safe(text: str | None) -> str | None:
        return None if text is None else terminal_safe(text)

    return {"id": safe(incident.id), "status": str(incident.status), "category": safe(incident.category),
            "severity": str(incident.severity), "action": str(incident.action), "job": safe(incident.job),
            "node": safe(incident.node), "ranks": list(incident.ranks), "first_ts": incident.first_ts,
            "ts": incident.ts, "detection_delay_s": round(incident.ts - incident.first_ts, 3),
            "evidence": [terminal_safe(line) for line in incident.evidence]}
