"""The alert bridge's one validated config: its sinks, which severities each gets, retries, backlog.

Secrets (the PagerDuty routing key, a webhook URL, which for Slack is a credential) are
SecretStr: they never appear in reprs or logs. The fields are `trainmedic alerts`' flags,
TRAINMEDIC_ALERTS_* variables and YAML keys (trainmedic.bus.config); the PagerDuty and webhook sections
are YAML only, their secrets from the environment only.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from trainmedic.schemas.incident import Severity

ALL = (Severity.SEV1, Severity.SEV2, Severity.SEV3, Severity.WARN)
PAGES = (Severity.SEV1, Severity.SEV2)
PAGERDUTY_URL = "https://events.pagerduty.com/v2/enqueue"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RetryConfig(_Frozen):
    """Exponential backoff between attempts at one delivery: initial_s, x factor, up to max_s."""

    initial_s: float = Field(default=1.0, gt=0, description="retry: the first wait after a failed delivery")
    factor: float = Field(default=2.0, ge=1, description="retry: each wait is the one before times this")
    max_s: float = Field(default=60.0, gt=0, description="retry: the longest wait")

    @model_validator(mode="after")
    def _ordered(self) -> RetryConfig:
        if self.max_s < self.initial_s:
            raise ValueError("retry.max_s must be at least retry.initial_s")
        return self


class PostLimits(_Frozen):
    """At most `posts_per_node` incidents of one node and `posts_per_job` of one job are posted per
    `posts_window_s`; the rest are held back and one summary says how many (ops/alerts/limits.py)."""

    posts_per_node: int = Field(default=10, ge=1,
                                description="limits: incidents of one node posted per window")
    posts_per_job: int = Field(default=10, ge=1, description="limits: incidents of one job posted per window")
    posts_window_s: float = Field(default=60.0, gt=0, description="limits: the window, seconds")


class AlertmanagerSink(_Frozen):
    """Alertmanager API v2; open alerts are re-posted every resend_s and expire 4 x resend_s later."""

    url: str = Field(min_length=1, description="base URL, e.g. http://alertmanager:9093")
    severities: tuple[Severity, ...] = ALL
    resend_s: float = Field(default=60.0, gt=0)


class PagerDutySink(_Frozen):
    """PagerDuty Events API v2."""

    url: str = PAGERDUTY_URL
    routing_key: SecretStr
    severities: tuple[Severity, ...] = PAGES


class WebhookSink(_Frozen):
    """Any JSON webhook; the body has a Slack-compatible `text`."""

    url: SecretStr
    severities: tuple[Severity, ...] = PAGES


class AlertBridgeConfig(_Frozen):
    """The sinks (at least one) and how the bridge reads and delivers. `group_id` has no default: the
    command derives it from the topic prefix (`<prefix>alerts`)."""

    alertmanager: AlertmanagerSink | None = Field(None, json_schema_extra={"shorthand": "url"},
                                                  description="Alertmanager base URL: enables that sink "
                                                  "(its other settings from the file, else defaults)")
    pagerduty: PagerDutySink | None = None
    webhook: WebhookSink | None = None
    retry: RetryConfig = RetryConfig()
    limits: PostLimits = PostLimits()
    backlog_max: int = Field(default=10_000, ge=1, description="deliveries held before consumption pauses")
    timeout_s: float = Field(default=10.0, gt=0, description="per HTTP request")
    group_id: str = Field(min_length=1, description="the consumer group on the incidents topic "
                          "(default: <topic prefix>alerts)")
    generator_url: str = Field(default="http://localhost:3000/d/trainmedic/trainmedic?var-incident={id}",
                               description="link back from an alert; {id} is the incident id")

    @model_validator(mode="after")
    def _some_sink(self) -> AlertBridgeConfig:
        if not self.sinks():
            raise ValueError("no sink configured: give at least one of alertmanager, pagerduty, webhook")
        return self

    def sinks(self) -> dict[str, AlertmanagerSink | PagerDutySink | WebhookSink]:
        """The configured sinks by name, in a fixed order."""
        named = {"alertmanager": self.alertmanager, "pagerduty": self.pagerduty, "webhook": self.webhook}
        return {name: sink for name, sink in named.items() if sink is not None}
