"""`trainmedic detector`: its options as flags, TRAINMEDIC_DETECTOR_* variables and YAML keys, the
detection core's sections in the same file (JSON still reads), its app id under the topic prefix."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from trainmedic.bus.settings import KafkaSettings
from trainmedic.cli import main
from trainmedic.common.errors import ConfigError
from trainmedic.streams.checkpoints.topic import CheckpointTopic
from trainmedic.streams.cli import add_arguments, build_config
from trainmedic.streams.core import DetectorConfig, HangConfig

ACME = KafkaSettings(topic_prefix="acme.")
NOW = 1_750_000_000.0


def config(argv: list[str], env: dict[str, str] | None = None, settings: KafkaSettings = ACME):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return build_config(parser.parse_args(argv), settings, env or {"TRAINMEDIC_HOME": "/srv/tm"})


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_app_id_and_its_topics_derive_from_the_topic_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINMEDIC_TOPIC_PREFIX", "acme.")
    got = config([], settings=KafkaSettings.from_env())
    assert got.app_id == "acme.detector"
    assert CheckpointTopic(KafkaSettings(), got.app_id).topic == "acme.detector-checkpoints"
    assert config([], settings=KafkaSettings()).app_id == "trainmedic.detector"


def test_an_explicit_app_id_overrides_the_prefix(tmp_path: Path) -> None:
    assert config(["--app-id", "mine"]).app_id == "mine"
    assert config([], {"TRAINMEDIC_DETECTOR_APP_ID": "env"}).app_id == "env"
    assert config(["--config", write(tmp_path, "d.yaml", "app_id: file\n")]).app_id == "file"


def test_defaults_stand_where_nothing_is_given() -> None:
    got = config([])
    assert (got.engine, got.start, got.live.lateness_s, got.web_port, got.loglevel) == (
        "consumer", "latest", 0.5, None, "info")
    assert got.datadir == Path("/srv/tm/detector").resolve()
    assert got.detection == DetectorConfig()


def test_a_json_file_of_the_core_sections_still_reads(tmp_path: Path) -> None:
    sections = {"hang": {"floor_s": 30.0}, "escalation": {"sev2_count": 3}}
    got = config(["--config", write(tmp_path, "detector.json", json.dumps(sections))])
    assert got.detection == DetectorConfig.from_dict(sections) and got.detection.hang.floor_s == 30.0


def test_flags_beat_variables_beat_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "d.yaml", "engine: faust\nlive: {lateness_s: 1, idle_s: 4}\nweb_port: 6066\n"
                                     "loglevel: debug\nhang: {floor_s: 25}\n")
    env = {"TRAINMEDIC_DETECTOR_LATENESS_S": "2", "TRAINMEDIC_DETECTOR_WEB_PORT": "6067",
           "TRAINMEDIC_DETECTOR_ENGINE": "consumer"}
    got = config(["--config", path, "--lateness-s", "3", "--datadir", "/tmp/faust"], env)
    assert (got.engine, got.live.lateness_s, got.live.idle_s, got.web_port, got.loglevel, got.datadir) == (
        "consumer", 3.0, 4.0, 6067, "debug", Path("/tmp/faust"))
    assert got.detection.hang == HangConfig(floor_s=25)


@pytest.mark.parametrize(("given", "at"), [
    ("earliest", "earliest"), ("latest", "latest"), ("10m", NOW - 600),
    ("2025-05-01T12:00:00Z", datetime(2025, 5, 1, 12, tzinfo=UTC).timestamp()),
])
def test_start_keeps_its_forms(given: str, at: str | float, tmp_path: Path) -> None:
    assert config(["--start", given]).start_at(NOW) == at
    assert config([], {"TRAINMEDIC_DETECTOR_START": given}).start_at(NOW) == at


def test_an_unquoted_yaml_time_is_a_start(tmp_path: Path) -> None:
    got = config(["--config", write(tmp_path, "d.yaml", "start: 2025-05-01T12:00:00Z\n")])
    assert got.start_at(NOW) == datetime(2025, 5, 1, 12, tzinfo=UTC).timestamp()


def test_the_core_sections_are_no_flags() -> None:
    with pytest.raises(SystemExit):
        config(["--hang", "{}"])


@pytest.mark.parametrize(("argv", "env", "text", "says"), [
    (["--start", "yesterday"], {}, "", "--start: 'yesterday' is not a time"),
    ([], {"TRAINMEDIC_DETECTOR_LATENESS_S": "-1"}, "",
     "TRAINMEDIC_DETECTOR_LATENESS_S: Input should be greater than or equal to 0"),
    ([], {}, "hang: {factor: 1.0}\n", "d.yaml: hang: HangConfig.factor must be > 1"),
    ([], {}, "hang: {floor: 3}\n", "d.yaml: hang.floor: Unexpected keyword argument"),
    ([], {}, "correlation: {symptom_hold_s: 25}\n", "correlation.symptom_hold_s must be < hang.floor_s"),
    ([], {}, "nope: {}\n", "d.yaml: nope: Extra inputs are not permitted"),
    (["--web-port", "0"], {}, "", "--web-port: Input should be greater than or equal to 1"),
    (["--stage", "ingest", "--engine", "faust"], {}, "", "stage ingest runs on the consumer engine only"),
    (["--instance", "a b"], {}, "", "--instance: String should match pattern"),
])
def test_a_bad_setting_is_one_line_naming_its_source(tmp_path: Path, argv: list[str], env: dict[str, str],
                                                     text: str, says: str) -> None:
    with pytest.raises(ConfigError) as error:
        config(["--config", write(tmp_path, "d.yaml", text), *argv], env)
    assert says in str(error.value) and "\n" not in str(error.value)


def test_the_command_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["detector", "--start", "yesterday", "--bootstrap", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trainmedic detector: --start: 'yesterday' is not a time") and err.count("\n") == 1


def test_every_section_of_the_core_is_a_section_of_the_service_config() -> None:
    from trainmedic.streams.config import CORE_SECTIONS, DetectorServiceConfig

    assert set(CORE_SECTIONS) <= set(DetectorServiceConfig.model_fields)


def test_a_sharded_detector_is_two_stages_of_one_app_id() -> None:
    """Every ingest instance and the decider share the app id: its group, its events topic."""
    ingest = config(["--stage", "ingest", "--instance", "host-7"])
    decide = config(["--stage", "decide"])
    assert (ingest.stage, ingest.instance, decide.stage) == ("ingest", "host-7", "decide")
    assert ingest.app_id == decide.app_id == "acme.detector" and ingest.events_partitions == 12
    assert config([]).stage == "all"
