"""The healer's alerting rules (compose/prometheus/rules.yml) with Debian's promtool: valid, and
firing exactly as their unit tests (rules_test.yml, synthetic series) say."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.conftest import ROOT
from trainmedic.local import ops_stack

RULES = ROOT / "compose" / "prometheus"


def promtool(*args: str) -> subprocess.CompletedProcess:
    path = ops_stack.binary("promtool")
    if path is None:
        pytest.fail(f"promtool is not installed: run {ops_stack.HOW_TO_GET}; this test never skips")
    return subprocess.run([str(path), *args], cwd=RULES, capture_output=True, text=True, timeout=60)


def test_the_rules_are_valid() -> None:
    done = promtool("check", "rules", "rules.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rules_fire_as_their_unit_tests_say() -> None:
    done = promtool("test", "rules", "rules_test.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_rule_has_a_summary_a_unit_test_and_a_runbook_line() -> None:
    names = [rule["alert"] for group in ops_stack.rules()["groups"] for rule in group["rules"]]
    tested = (RULES / "rules_test.yml").read_text()
    runbook = (ROOT / "docs" / "metrics.md").read_text()
    for group in ops_stack.rules()["groups"]:
        assert all(rule["annotations"]["summary"] for rule in group["rules"])
    assert [name for name in names if f"alertname: {name}" not in tested] == []
    assert [name for name in names if f"| `{name}` |" not in runbook] == []
    assert yaml.safe_load((RULES / "prometheus.yml").read_text())["rule_files"] == ["rules.yml"]
