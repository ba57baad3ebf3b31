"""The operator commands' shared prologue: each error kind's exit status and its one line on stderr, and
the settings an operator command takes from the `trainmedic run` record when nothing names a deployment."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from trainmedic.bus.settings import DEFAULT_BOOTSTRAP, DEFAULT_PREFIX
from trainmedic.cli import main
from trainmedic.common.errors import ConfigError, KafkaError
from trainmedic.ops.prologue import operator_settings, run_command
from trainmedic.ops.run_records import record_run


class Refused(ValueError):
    """A usage error of the command's own."""


def raising(error: BaseException):
    def body(args: argparse.Namespace) -> int:
        raise error

    return body


def test_the_body_runs_with_the_args_and_its_status_is_the_exit_status(capsys) -> None:
    args = argparse.Namespace(action="list")
    assert run_command("job", lambda given: 7 if given is args else 0, args) == 7
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("error", "usage", "code", "line"), [
    (ConfigError("no operator key in /k:\n  run `trainmedic keys generate`"), (), 2,
     "trainmedic job: no operator key in /k: run `trainmedic keys generate`\n"),
    (Refused("unknown node 'n9'"), (Refused,), 2, "trainmedic job: unknown node 'n9'\n"),
    (KafkaError("no Kafka broker answered", code="_TRANSPORT"), (), 1,
     "trainmedic job: no Kafka broker answered [_TRANSPORT]\n"),
])
def test_an_error_is_one_line_on_stderr_and_its_exit_status(capsys, error, usage, code, line) -> None:
    assert run_command("job", raising(error), argparse.Namespace(), usage=usage) == code
    captured = capsys.readouterr()
    assert captured.err == line and captured.out == ""


def test_an_error_the_command_does_not_name_is_not_hidden() -> None:
    with pytest.raises(Refused):
        run_command("job", raising(Refused("a bug")), argparse.Namespace())


def test_ctrl_c_is_130_unless_the_command_ends_that_way_and_a_closed_pipe_is_0(capsys) -> None:
    assert run_command("nodes", raising(KeyboardInterrupt()), argparse.Namespace()) == 130
    assert run_command("incidents", raising(KeyboardInterrupt()), argparse.Namespace(), interrupted=0) == 0
    assert run_command("incidents", raising(BrokenPipeError()), argparse.Namespace()) == 0
    assert capsys.readouterr().err == ""


def test_a_bad_since_is_a_usage_error_of_incidents(capsys) -> None:
    assert main(["incidents", "list", "--since", "yesterday", "--bootstrap", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trainmedic incidents: --since: 'yesterday' is not a time") and err.count("\n") == 1


@pytest.fixture
def runs(tmp_path: Path, monkeypatch) -> Path:
    """A home with two runs' records, b the newer; nothing in the environment names a deployment."""
    monkeypatch.setenv("TRAINMEDIC_HOME", str(tmp_path))
    for name in ("TRAINMEDIC_TOPIC_PREFIX", "TRAINMEDIC_KAFKA_BOOTSTRAP", "TRAINMEDIC_KAFKA_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    record_run(tmp_path, "a", "run-aaaaaa.", "127.0.0.1:19092", 100.0)
    record_run(tmp_path, "b", "run-bbbbbb.", "127.0.0.1:29092", 200.0)
    return tmp_path


def options(**given: str) -> argparse.Namespace:
    return argparse.Namespace(**{"bootstrap": None, **given})


def test_without_a_prefix_a_command_about_a_job_uses_that_jobs_run(runs, capsys) -> None:
    settings = operator_settings(options(), job="a")
    assert (settings.topic_prefix, settings.bootstrap) == ("run-aaaaaa.", "127.0.0.1:19092")
    assert capsys.readouterr().err == "(run a: topics run-aaaaaa.* on 127.0.0.1:19092)\n"


def test_a_command_about_no_job_uses_the_newest_run(runs, capsys) -> None:
    settings = operator_settings(options())
    assert (settings.topic_prefix, settings.bootstrap) == ("run-bbbbbb.", "127.0.0.1:29092")
    assert capsys.readouterr().err.startswith("(run b: topics run-bbbbbb.*")


def test_a_job_no_run_recorded_gets_the_defaults_not_another_jobs_run(runs, capsys) -> None:
    settings = operator_settings(options(), job="llm")
    assert (settings.topic_prefix, settings.bootstrap) == (DEFAULT_PREFIX, DEFAULT_BOOTSTRAP)
    assert capsys.readouterr().err == ""


def test_the_environments_prefix_wins_over_the_run(runs, monkeypatch, capsys) -> None:
    monkeypatch.setenv("TRAINMEDIC_TOPIC_PREFIX", "acme.")
    settings = operator_settings(options(), job="a")
    assert (settings.topic_prefix, settings.bootstrap) == ("acme.", DEFAULT_BOOTSTRAP)
    assert capsys.readouterr().err == ""


def test_an_option_naming_the_deployment_wins_over_the_run(runs, capsys) -> None:
    assert operator_settings(options(bootstrap="127.0.0.1:9"), job="a").topic_prefix == DEFAULT_PREFIX
    settings = operator_settings(options(prefix="mine."), role="admin")
    assert (settings.topic_prefix, settings.bootstrap) == ("mine.", DEFAULT_BOOTSTRAP)
    assert operator_settings(options(), from_run=False).topic_prefix == DEFAULT_PREFIX
    assert capsys.readouterr().err == ""


def test_a_run_on_another_broker_than_the_environments_is_not_used(runs, monkeypatch) -> None:
    monkeypatch.setenv("TRAINMEDIC_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
    assert operator_settings(options(), job="a").topic_prefix == "run-aaaaaa."
    assert operator_settings(options(), job="b").topic_prefix == DEFAULT_PREFIX
