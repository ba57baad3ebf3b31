"""`trainmedic alerts`: its options as flags, TRAINMEDIC_ALERTS_* variables and YAML keys, its
secrets from the environment only, its consumer group under the topic prefix."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from trainmedic.bus.settings import KafkaSettings
from trainmedic.cli import main
from trainmedic.common.errors import ConfigError
from trainmedic.ops.alerts.cli import add_arguments, build_config
from trainmedic.ops.alerts.config import AlertBridgeConfig, AlertmanagerSink, RetryConfig

ACME = KafkaSettings(topic_prefix="acme.")


def config(argv: list[str], env: dict[str, str] | None = None, settings: KafkaSettings = ACME):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return build_config(parser.parse_args(argv), settings, env or {})


def yaml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "alerts.yaml"
    path.write_text(text)
    return str(path)


AM = ["--alertmanager", "http://am:9093"]


def test_the_group_derives_from_the_topic_prefix_unless_given(tmp_path: Path) -> None:
    assert config(AM).group_id == "acme.alerts"
    assert config(AM, settings=KafkaSettings()).group_id == "trainmedic.alerts"
    assert config([*AM, "--group-id", "mine"]).group_id == "mine"
    assert config(AM, {"TRAINMEDIC_ALERTS_GROUP_ID": "env"}).group_id == "env"
    assert config(["--config", yaml(tmp_path, "group_id: file\nalertmanager: {url: http://am}\n")]
                  ).group_id == "file"


def test_the_prefix_variable_reaches_the_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINMEDIC_TOPIC_PREFIX", "acme.")
    assert config(AM, settings=KafkaSettings.from_env()).group_id == "acme.alerts"


def test_flags_beat_variables_beat_the_file(tmp_path: Path) -> None:
    path = yaml(tmp_path, "alertmanager: {url: http://file, severities: [SEV1], resend_s: 30}\n"
                          "retry: {initial_s: 2, max_s: 30}\ntimeout_s: 3\nbacklog_max: 50\n")
    env = {"TRAINMEDIC_ALERTS_TIMEOUT_S": "4", "TRAINMEDIC_ALERTS_BACKLOG_MAX": "60",
           "TRAINMEDIC_ALERTS_ALERTMANAGER": "http://env"}
    argv = ["--config", path, "--timeout-s", "5", "--max-s", "20", "--alertmanager", "http://flag"]
    got = config(argv, env)
    assert got == AlertBridgeConfig(
        alertmanager=AlertmanagerSink(url="http://flag", severities=("SEV1",), resend_s=30),
        retry=RetryConfig(initial_s=2, max_s=20), timeout_s=5, backlog_max=60, group_id="acme.alerts")
    # the flag's URL only replaces the file's; its other Alertmanager settings stay
    assert config(["--config", path], env).alertmanager == AlertmanagerSink(
        url="http://env", severities=("SEV1",), resend_s=30)


def test_secrets_come_from_the_environment_or_a_file_it_names(tmp_path: Path) -> None:
    key = tmp_path / "pd"
    key.write_text("pd-key\n")
    path = yaml(tmp_path, "pagerduty: {severities: [SEV1]}\nwebhook:\n")
    got = config(["--config", path], {"TRAINMEDIC_PAGERDUTY_ROUTING_KEY_FILE": str(key),
                                      "TRAINMEDIC_WEBHOOK_URL": "https://hooks.example/T/B/x"})
    assert got.pagerduty.routing_key.get_secret_value() == "pd-key"
    assert got.pagerduty.severities == ("SEV1",)
    assert got.webhook.url.get_secret_value() == "https://hooks.example/T/B/x"
    with pytest.raises(SystemExit):
        config(["--pagerduty", "x"])


@pytest.mark.parametrize(("text", "argv", "env", "says"), [
    ("pagerduty: {routing_key: k}\n", [], {}, "pagerduty.routing_key is a secret: set "
     "TRAINMEDIC_PAGERDUTY_ROUTING_KEY"),
    ("webhook: {}\n", [], {},
     "the webhook sink needs TRAINMEDIC_WEBHOOK_URL (or TRAINMEDIC_WEBHOOK_URL_FILE)"),
    ("", [], {}, "no sink configured"),
    ("alertmanager: {url: http://am}\n", ["--initial-s", "10", "--max-s", "1"], {},
     "retry.max_s must be at least retry.initial_s"),
    ("alertmanager: {url: http://am}\n", [], {"TRAINMEDIC_ALERTS_TIMEOUT_S": "0"},
     "TRAINMEDIC_ALERTS_TIMEOUT_S: Input should be greater than 0"),
    ("alertmanager: {url: http://am}\nsinks: 3\n", [], {},
     "alerts.yaml: sinks: Extra inputs are not permitted"),
])
def test_a_bad_setting_is_one_line(tmp_path: Path, text: str, argv: list[str], env: dict[str, str],
                                   says: str) -> None:
    with pytest.raises(ConfigError) as error:
        config(["--config", yaml(tmp_path, text), *argv], env)
    assert says in str(error.value) and "\n" not in str(error.value)


def test_the_command_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["alerts", "--bootstrap", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trainmedic alerts: ") and "no sink configured" in err and err.count("\n") == 1
