"""The preamble the long-running services share: one spelling of the Kafka and metrics flags, the exit
codes (1: failed while running, after saying why) and a run that SIGTERM ends instead of killing."""

from __future__ import annotations

import argparse
import os
import signal
import threading

import pytest

from trainmedic.bus.service_cli import run_until_stopped
from trainmedic.cli import build_parser
from trainmedic.common.errors import KafkaError

SERVICES = ("detector", "coordinator", "alerts", "executor", "gpu", "agent", "node")


def shared_flags(command: str) -> dict[str, tuple[object, str | None]]:
    parser = build_parser(command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {flag: (action.default, action.help) for action in sub.choices[command]._actions
            for flag in action.option_strings if flag in ("--bootstrap", "--metrics-port", "--metrics-host")}


def test_every_service_spells_the_kafka_and_metrics_flags_alike() -> None:
    spelled = {command: shared_flags(command) for command in SERVICES}
    assert set(spelled["detector"]) == {"--bootstrap", "--metrics-port", "--metrics-host"}
    assert "default 127.0.0.1:9092" in str(spelled["detector"]["--bootstrap"][1])
    for command, flags in spelled.items():
        assert flags == spelled["detector"], command


def test_a_failure_while_running_exits_1_and_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    def body(stop: threading.Event) -> None:
        raise KafkaError("broker unreachable", code="_TRANSPORT")

    assert run_until_stopped("detector", body) == 1
    assert capsys.readouterr().err == "trainmedic detector: broker unreachable [_TRANSPORT]\n"


def test_sigterm_ends_the_run_not_the_process() -> None:
    seen: list[bool] = []

    def body(stop: threading.Event) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        seen.append(stop.wait(5))

    before = signal.getsignal(signal.SIGTERM)
    assert run_until_stopped("alerts", body) == 0
    assert seen == [True] and signal.getsignal(signal.SIGTERM) is before
