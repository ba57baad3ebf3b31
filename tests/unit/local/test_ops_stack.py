"""The local ops stack's pure parts: the generated Prometheus config, the rules' `for:` override, when
a counter first rose after a fault, and what `demo --observe` says without the packages."""

from __future__ import annotations

import argparse

import pytest

from trainmedic.demo import observe, runner
from trainmedic.local import ops_stack


def test_the_config_scrapes_each_job_and_alerts_into_the_alertmanager() -> None:
    config = ops_stack.config({"detector": ["127.0.0.1:9101"], "executor": ["127.0.0.1:1", "127.0.0.1:2"]},
                              alertmanager="http://127.0.0.1:9093/", rule_file=None, interval_s=1)
    assert config["global"]["scrape_interval"] == "1s" and config["global"]["evaluation_interval"] == "1s"
    assert config["scrape_configs"][1] == {"job_name": "executor",
                                           "static_configs": [{"targets": ["127.0.0.1:1", "127.0.0.1:2"]}]}
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["127.0.0.1:9093"]


def test_the_shipped_rules_with_a_short_for() -> None:
    shipped = ops_stack.rules()
    short = ops_stack.rules(for_s=1)
    assert [r["alert"] for g in short["groups"] for r in g["rules"]] == [
        r["alert"] for g in shipped["groups"] for r in g["rules"]]
    assert {r["for"] for g in short["groups"] for r in g["rules"]} == {"1s"}
    assert [r["expr"] for g in short["groups"] for r in g["rules"]] == [
        r["expr"] for g in shipped["groups"] for r in g["rules"]]


def test_when_a_counter_first_rose_after_the_injection() -> None:
    samples = [(98.0, 2.0), (99.0, 2.0), (100.0, 2.0), (101.0, 2.0), (102.5, 3.0), (104.0, 4.0)]
    assert observe.first_rise(samples, since=100.0) == 2.5
    assert observe.first_rise(samples, since=105.0) is None
    assert observe.first_rise([(103.0, 1.0)], since=100.0) == 3.0  # the series appeared after it
    assert observe.first_rise([(99.0, float("nan")), (101.0, 1.0)], since=100.0) == 1.0


def test_observe_without_the_packages_says_how_to_get_them(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture, tmp_path) -> None:
    monkeypatch.setattr(ops_stack, "binary", lambda name: None)
    args = argparse.Namespace(nodes=2, alertmanager=None)
    assert runner.observed(args, tmp_path) == (None, None)
    out = capsys.readouterr().out
    assert "prometheus and alertmanager not installed" in out and "make prometheus alertmanager" in out
