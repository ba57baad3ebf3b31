"""The Grafana dashboard and its provisioning: loadable, and every query uses only metrics we export.

The schema checked is what Grafana needs to import a dashboard from a file (uid, title,
schemaVersion, panels with a type, title and gridPos) plus our rule that every panel reads
the provisioned Prometheus datasource, and a light PromQL check: balanced brackets, and every
name in an expression is a PromQL function or keyword, a label, or a sample we export.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

import trainmedic.bus.metrics
import trainmedic.ops.alerts.metrics
import trainmedic.recovery.coordinator.metrics
import trainmedic.recovery.executor.metrics
import trainmedic.streams.metrics
from tests.conftest import ROOT

GRAFANA = ROOT / "compose" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "trainmedic.json"
PROMQL_WORDS = {"sum", "avg", "min", "max", "count", "rate", "irate", "increase", "histogram_quantile",
                "by", "without", "topk", "bottomk", "clamp_min", "clamp_max", "and", "or", "unless", "on",
                "ignoring"}
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported() -> tuple[set[str], set[str]]:
    """Sample names and label names of every metric the services define."""
    samples, labels = set(), {"le"}
    modules = (trainmedic.bus.metrics, trainmedic.streams.metrics, trainmedic.recovery.coordinator.metrics,
               trainmedic.recovery.executor.metrics, trainmedic.ops.alerts.metrics)
    for metric in (value for module in modules for value in vars(module).values()):
        if isinstance(metric, MetricWrapperBase):
            for family in metric.describe():
                samples |= {family.name + suffix for suffix in SUFFIXES[family.type]}
            labels |= set(metric._labelnames)
    return samples, labels


def unknown_names(expr: str) -> set[str]:
    """Names in a PromQL expression that are neither PromQL words, labels, nor exported samples."""
    samples, labels = exported()
    bare = re.sub(r'"[^"]*"', '""', expr)  # label values
    bare = re.sub(r"\[[0-9]+[smhd]\]", "", bare)  # range selectors
    names = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", bare))
    return names - PROMQL_WORDS - labels - samples


def balanced(expr: str) -> bool:
    stack, pairs = [], {")": "(", "]": "[", "}": "{"}
    for char in re.sub(r'"[^"]*"', '""', expr):
        if char in "([{":
            stack.append(char)
        elif char in pairs and (not stack or stack.pop() != pairs[char]):
            return False
    return not stack


def panels() -> list[dict]:
    return json.loads(DASHBOARD.read_text())["panels"]


def test_the_dashboard_has_what_grafana_needs_to_load_it() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert {"uid", "title", "schemaVersion", "panels", "time"} <= set(dashboard)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert {"type", "title", "gridPos", "datasource", "targets"} <= set(panel), panel["title"]
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])


@pytest.mark.parametrize("panel", panels(), ids=lambda p: p["title"])
def test_every_query_reads_prometheus_and_uses_only_exported_metrics(panel: dict) -> None:
    assert panel["datasource"] == {"type": "prometheus", "uid": "prometheus"}
    assert panel["targets"]
    for target in panel["targets"]:
        expr = target["expr"]
        assert balanced(expr), expr
        assert unknown_names(expr) == set(), expr
        assert re.search(r"trainmedic_\w+", expr), expr


def test_the_check_catches_a_metric_that_does_not_exist() -> None:
    assert unknown_names('sum by (sink) (rate(trainmedic_alerts_sent_total{sink="x"}[5m]))') == {
        "trainmedic_alerts_sent_total"}
    assert not balanced("sum(rate(trainmedic_incidents_total[5m])")


def test_the_dashboard_covers_the_operators_questions() -> None:
    exprs = " ".join(t["expr"] for p in panels() for t in p["targets"])
    for name in ("trainmedic_nodes", "trainmedic_open_incidents", "trainmedic_incidents_total",
                 "trainmedic_detection_delay_seconds_bucket", "trainmedic_recovery_acked_seconds_bucket",
                 "trainmedic_dead_letters_total", "trainmedic_consumer_lag", "trainmedic_alert_backlog"):
        assert name in exprs


def test_every_metric_is_named_under_trainmedic() -> None:
    samples, _ = exported()
    assert samples and all(name.startswith("trainmedic_") for name in samples)


def test_provisioning_points_grafana_at_the_dashboard_and_the_datasource_uid() -> None:
    source = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())
    assert source["datasources"][0]["uid"] == "prometheus"
    provider = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "trainmedic.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    compose = yaml.safe_load((ROOT / "compose" / "docker-compose.yml").read_text())
    grafana_volumes = compose["services"]["grafana"]["volumes"]
    assert "./grafana/dashboards:/var/lib/grafana/dashboards:ro" in grafana_volumes
    assert {"prometheus", "grafana", "alertmanager", "alerts"} <= set(compose["services"])
