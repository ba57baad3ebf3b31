"""Forward incidents to Alertmanager, PagerDuty and a JSON webhook (Slack-compatible).

Reads the incidents (the detector's topic, and the coordinator's escalations on its recovery
topic) in a consumer group. Each incident, when opened and when resolved,
goes to the sinks its severity is routed to; the offset is committed only after every sink
took it, so a sink that is down delays alerts and never loses them (retries back off
exponentially; while more than backlog_max deliveries wait, consumption pauses). Open alerts
are re-posted to Alertmanager every resend_s. Each outcome is recorded on the alerts topic.
See docs/alerts.md.

Every option can also be set by its variable (TRAINMEDIC_ALERTS_*, e.g.
TRAINMEDIC_ALERTS_ALERTMANAGER, TRAINMEDIC_ALERTS_GROUP_ID) or in the --config YAML file
(format below). The consumer group defaults to <topic prefix>alerts, so two deployments on one
Kafka cluster never share one. Secrets come from the environment, never from the file or a flag:
  TRAINMEDIC_PAGERDUTY_ROUTING_KEY or TRAINMEDIC_PAGERDUTY_ROUTING_KEY_FILE
  TRAINMEDIC_WEBHOOK_URL or TRAINMEDIC_WEBHOOK_URL_FILE   (Slack webhook URLs are credentials)
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainmedic.bus.config import Options, Section
from trainmedic.bus.service_cli import add_service_arguments, exit_with, run_until_stopped
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import ConfigError
from trainmedic.ops.alerts.config import AlertBridgeConfig

CONFIG_FORMAT = """\
config file (YAML; a section enables its sink; every key but alertmanager.url is optional):
  alertmanager:
    url: http://alertmanager:9093
    severities: [SEV1, SEV2, SEV3, WARN]   # the default
    resend_s: 60                            # re-post open alerts; they expire after 4 x resend_s
  pagerduty:                                # routing key from the environment (see above)
    url: https://events.pagerduty.com/v2/enqueue
    severities: [SEV1, SEV2]                # the default
  webhook:                                  # URL from the environment (see above)
    severities: [SEV1, SEV2]                # the default
  retry: {initial_s: 1, factor: 2, max_s: 60}
  backlog_max: 10000                        # deliveries waiting before consumption pauses
  timeout_s: 10                             # per HTTP request
  group_id: acme.alerts                     # default: the topic prefix + alerts
  generator_url: "http://grafana:3000/d/trainmedic/trainmedic?var-incident={id}"
"""

# The PagerDuty and webhook sections carry credentials: YAML for their routing, the secret from
# the environment (SECRETS), never a flag.
ALERTS = Section(AlertBridgeConfig, env="ALERTS", file_only=("pagerduty", "webhook"))
OPTIONS = Options(ALERTS)
SECRETS = (("pagerduty", "routing_key", "TRAINMEDIC_PAGERDUTY_ROUTING_KEY"),
           ("webhook", "url", "TRAINMEDIC_WEBHOOK_URL"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_service_arguments(parser, OPTIONS, CONFIG_FORMAT)


def _secret(env: Mapping[str, str], name: str) -> str | None:
    """The value of env NAME, or the stripped contents of the file env NAME_FILE names."""
    if env.get(name):
        return env[name]
    path = env.get(f"{name}_FILE")
    if not path:
        return None
    try:
        return Path(path).read_text().strip()
    except OSError as err:
        raise ConfigError(f"{name}_FILE: cannot read {path}: {err.strerror or err}") from None


def _put_secrets(values: dict[str, Any], env: Mapping[str, str]) -> None:
    """Each enabled sink's credential from the environment; refused in the file."""
    for section, field, name in SECRETS:
        if section not in values or not isinstance(values[section] or {}, dict):
            continue  # absent, or not a mapping: validation says so
        sink = dict(values[section] or {})
        if field in sink:
            raise ConfigError(f"{section}.{field} is a secret: set {name} (or {name}_FILE) instead")
        secret = _secret(env, name)
        if secret is None:
            raise ConfigError(f"the {section} sink needs {name} (or {name}_FILE)")
        values[section] = {**sink, field: secret}


def build_config(args: argparse.Namespace, settings: KafkaSettings,
                 env: Mapping[str, str] = os.environ) -> AlertBridgeConfig:
    """The validated config from flags, TRAINMEDIC_ALERTS_* variables, the file and the secrets in
    `env`; the group under the topic prefix unless given. ConfigError says what is wrong."""
    return OPTIONS.build(ALERTS, args, env, secrets=lambda values: _put_secrets(values, env),
                         group_id=lambda _: settings.topics.owned("alerts"))


def run(args: argparse.Namespace) -> int:
    import logging
    import threading

    from trainmedic.bus.lag import LagSampler
    from trainmedic.bus.metrics import serve_metrics
    from trainmedic.ops.alerts.bridge import AlertBridge, incident_topics

    log = logging.getLogger("trainmedic.alerts")
    try:
        settings = KafkaSettings.from_env(role="ops", bootstrap=args.bootstrap)
        config = build_config(args, settings)
    except ConfigError as err:
        return exit_with(2, "alerts", err)
    sampler = None
    if serve_metrics(args.metrics_port, args.metrics_host) is not None:
        sampler = LagSampler(settings, config.group_id, incident_topics(settings)).start()
    bridge = AlertBridge(settings, config)

    def forward(stop: threading.Event) -> None:
        try:
            bridge.start()
            while not stop.is_set():
                bridge.step()
        finally:
            if sampler is not None:
                sampler.stop()
            bridge.close()
        log.info("stopped; %d deliveries were waiting: they are retried on restart", bridge.book.backlog())

    return run_until_stopped("alerts", forward)
