"""trainmedic.bus.config: one model's fields as flags, variables and YAML keys, and the model built from
them."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, model_validator

from trainmedic.bus.config import Options, Section
from trainmedic.common.errors import ConfigError

FROZEN = ConfigDict(frozen=True, extra="forbid")


class Queue(BaseModel):
    model_config = FROZEN
    max_items: int = Field(100, ge=1, description="queue bound")


class Pump(BaseModel):
    model_config = FROZEN
    name: str = Field(min_length=1, description="the pump's name")
    mode: Literal["fast", "slow"] = Field("slow", description="how it pumps")
    timeout_s: float = Field(5.0, gt=0, description="how long it waits")
    min_rate: int = Field(1, description="lowest rate")
    max_rate: int = Field(10, description="highest rate")
    dry_run: bool = Field(False, description="pump nothing")
    tags: tuple[str, ...] = Field((), description="labels")
    log: Path | None = Field(None, description="log file")
    secret: str = ""
    queue: Queue = Queue()

    @model_validator(mode="after")
    def _ordered(self) -> Pump:
        if self.min_rate > self.max_rate:
            raise ValueError("--min-rate exceeds --max-rate")
        return self


class Valve(BaseModel):
    model_config = FROZEN
    timeout_s: float = Field(1.0, gt=0)
    open: bool = True


PUMP = Section(Pump, env="PUMP", skip=("secret",))
OPTIONS = Options(PUMP)


def build(argv: list[str], env: dict[str, str] | None = None, options: Options = OPTIONS,
          section: Section = PUMP, **computed) -> BaseModel:
    parser = argparse.ArgumentParser()
    options.add_to(parser)
    return options.build(section, parser.parse_args(argv), env=env or {}, **computed)


def yaml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "pump.yaml"
    path.write_text(text)
    return str(path)


def test_flags_are_named_after_fields_and_typed_by_them() -> None:
    pump = build(["--name", "p1", "--mode", "fast", "--timeout-s", "2.5", "--dry-run", "--tags", "a,b",
                  "--log", "/tmp/x", "--max-items", "7"])
    assert pump == Pump(name="p1", mode="fast", timeout_s=2.5, dry_run=True, tags=("a", "b"),
                        log=Path("/tmp/x"), queue=Queue(max_items=7))


def test_defaults_stand_where_nothing_is_given() -> None:
    assert build(["--name", "p1"]) == Pump(name="p1")


def test_help_shows_description_default_and_variable_and_no_skipped_field(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser()
    OPTIONS.add_to(parser)
    parser.print_help()
    text = " ".join(capsys.readouterr().out.split())
    assert "--timeout-s SECONDS how long it waits (default 5.0; env TRAINMEDIC_PUMP_TIMEOUT_S)" in text
    assert "--mode {fast,slow}" in text and "--dry-run, --no-dry-run" in text
    assert "--secret" not in text
    with pytest.raises(SystemExit):
        parser.parse_args(["--mode", "medium"])


def test_variables_are_read_typed_like_flags() -> None:
    env = {"TRAINMEDIC_PUMP_NAME": "p2", "TRAINMEDIC_PUMP_DRY_RUN": "yes", "TRAINMEDIC_PUMP_TAGS": "x, y",
           "TRAINMEDIC_PUMP_MAX_ITEMS": "3"}
    assert build([], env) == Pump(name="p2", dry_run=True, tags=("x", "y"), queue=Queue(max_items=3))


def test_the_yaml_file_nests_models(tmp_path: Path) -> None:
    path = yaml(tmp_path, "name: p3\ntags: [a]\nqueue:\n  max_items: 9\n")
    assert build(["--config", path]) == Pump(name="p3", tags=("a",), queue=Queue(max_items=9))


def test_flag_beats_variable_beats_yaml_beats_computed(tmp_path: Path) -> None:
    path = yaml(tmp_path, "name: from-yaml\nmode: fast\nmin_rate: 3\n")
    env = {"TRAINMEDIC_PUMP_NAME": "from-env", "TRAINMEDIC_PUMP_MODE": "slow"}
    pump = build(["--config", path, "--name", "from-flag"], env, min_rate=lambda _: 5, max_rate=lambda v: 20)
    assert (pump.name, pump.mode, pump.min_rate, pump.max_rate) == ("from-flag", "slow", 3, 20)


def test_computed_values_see_the_given_ones() -> None:
    pump = build(["--min-rate", "4"], name=lambda values: f"pump-{values['min_rate']}")
    assert pump.name == "pump-4"


@pytest.mark.parametrize(("argv", "env", "says"), [
    (["--name", "p", "--timeout-s", "-1"], {}, "--timeout-s: Input should be greater than 0"),
    (["--name", "p"], {"TRAINMEDIC_PUMP_TIMEOUT_S": "soon"},
     "TRAINMEDIC_PUMP_TIMEOUT_S: Input should be a valid"),
    ([], {}, "--name (or TRAINMEDIC_PUMP_NAME): Field required"),
    (["--name", "p", "--min-rate", "11"], {}, "--min-rate exceeds --max-rate"),
    (["--name", "p"], {"TRAINMEDIC_PUMP_DRY_RUN": "maybe"},
     "TRAINMEDIC_PUMP_DRY_RUN: 'maybe' is not a boolean"),
    (["--name", "p", "--tags", "a,,b"], {}, "--tags: 'a,,b' has an empty item"),
])
def test_an_invalid_value_is_one_line_naming_its_source(
    argv: list[str], env: dict[str, str], says: str,
) -> None:
    with pytest.raises(ConfigError) as error:
        build(argv, env)
    assert str(error.value).startswith(says) and "\n" not in str(error.value)


@pytest.mark.parametrize(("text", "says"), [
    ("name: p\nqueue: {max_items: 0}\n", "pump.yaml: queue.max_items: Input should be greater than or equal"),
    ("name: p\npressure: 3\n", "pump.yaml: pressure: Extra inputs are not permitted"),
    ("name: p\nsecret: s\n", "not settings: secret"),
    ("- a list\n", "expected a mapping of settings"),
])
def test_a_bad_yaml_file_is_refused_naming_the_key(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ConfigError, match="pump.yaml") as error:
        build(["--config", yaml(tmp_path, text)])
    assert says in str(error.value)


def test_sections_share_a_command_and_clashing_fields_take_their_prefix(tmp_path: Path) -> None:
    pump = Section(Pump, env="PUMP", key="pump", prefix="pump-", skip=("secret",), title="pump")
    valve = Section(Valve, env="VALVE", key="valve", prefix="valve-")
    options = Options(pump, valve)
    path = yaml(tmp_path, "pump: {name: p}\nvalve: {timeout_s: 4}\n")
    argv = ["--config", path, "--pump-timeout-s", "2", "--no-open"]
    assert build(argv, {}, options, pump) == Pump(name="p", timeout_s=2.0)
    valve_env = {"TRAINMEDIC_VALVE_TIMEOUT_S": "3"}
    assert build(argv, valve_env, options, valve) == Valve(timeout_s=3.0, open=False)
    with pytest.raises(SystemExit):
        build(["--timeout-s", "1"], {}, options, pump)
    with pytest.raises(ConfigError, match="the sections are pump, valve"):
        build(["--config", yaml(tmp_path, "pipe: {}\n")], {}, options, pump)


class Sink(BaseModel):
    model_config = FROZEN
    url: str = Field(min_length=1)
    token: str
    retries: int = 3


class Station(BaseModel):
    model_config = FROZEN
    name: str = "s"
    sink: Sink | None = Field(None, description="the sink's URL", json_schema_extra={"shorthand": "url"})
    pumps: tuple[Pump, ...] = ()


STATION = Section(Station, env="STATION", file_only=("pumps",))
STATION_OPTIONS = Options(STATION)


def token(values: dict) -> None:
    if isinstance(values.get("sink"), dict):
        values["sink"] = {**values["sink"], "token": "t0k"}


def test_a_file_only_field_is_a_yaml_key_and_no_flag(tmp_path: Path) -> None:
    path = yaml(tmp_path, "pumps:\n  - {name: a}\n  - {name: b, mode: fast}\n")
    station = build(["--config", path], {}, STATION_OPTIONS, STATION)
    assert station.pumps == (Pump(name="a"), Pump(name="b", mode="fast"))
    with pytest.raises(SystemExit):
        build(["--pumps", "x"], {}, STATION_OPTIONS, STATION)
    with pytest.raises(ConfigError, match=r"pump.yaml: pumps.1.mode: Input should be 'fast' or 'slow'"):
        build(["--config", yaml(tmp_path, "pumps: [{name: a}, {name: b, mode: quick}]\n")], {},
              STATION_OPTIONS, STATION)


def test_a_shorthand_flag_sets_one_key_and_keeps_the_files_others(tmp_path: Path) -> None:
    path = yaml(tmp_path, "sink: {url: http://file, retries: 5}\n")
    given = build(["--config", path, "--sink", "http://flag"], {}, STATION_OPTIONS, STATION, secrets=token)
    assert given.sink == Sink(url="http://flag", token="t0k", retries=5)
    from_env = build([], {"TRAINMEDIC_STATION_SINK": "http://env"}, STATION_OPTIONS, STATION, secrets=token)
    assert from_env.sink == Sink(url="http://env", token="t0k")
    with pytest.raises(ConfigError, match="^--sink: String should have at least 1 character"):
        build(["--sink", ""], {}, STATION_OPTIONS, STATION, secrets=token)


def test_secrets_are_put_in_after_everything_else_and_may_refuse(tmp_path: Path) -> None:
    def refuse(values: dict) -> None:
        raise ConfigError("sink.token is a secret")

    assert build(["--sink", "http://x"], {}, STATION_OPTIONS, STATION, secrets=token).sink.token == "t0k"
    with pytest.raises(ConfigError, match="sink.token is a secret"):
        build(["--sink", "http://x"], {}, STATION_OPTIONS, STATION, secrets=refuse)
    with pytest.raises(ConfigError, match="^--sink: Field required"):
        build(["--sink", "http://x"], {}, STATION_OPTIONS, STATION)
