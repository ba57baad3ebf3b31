"""`trainmedic demo --observe`: Prometheus and Alertmanager beside the demo, and, per fault, when the
healer's own metrics counted its incident and its plan (docs/demo.md, "With Prometheus and
Alertmanager (`--observe`)").
"""

from __future__ import annotations

import json
import math
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from trainmedic.demo.faults import FaultResult
from trainmedic.local import ops_stack
from trainmedic.local.cluster import free_port

RULES_FOR_S = 5.0


@dataclass
class OpsStack:
    """The demo's Prometheus, its Alertmanager (None where the demo was given one), and what they scrape."""

    metrics_ports: dict[str, int]
    prometheus: ops_stack.Process | None = None
    alertmanager: ops_stack.Process | None = None
    started: float = 0.0  # wall clock

    def start(self, root: Path, alertmanager_url: str) -> None:
        targets = {"detector": ["detector"], "coordinator": ["coordinator"], "alerts": ["alerts"],
                   "executor": [name for name in self.metrics_ports
                                if name not in ("detector", "coordinator", "alerts")]}
        targets = {job: [f"127.0.0.1:{self.metrics_ports[name]}" for name in names]
                   for job, names in targets.items()}
        self.started = time.time()
        self.prometheus = ops_stack.start_prometheus(
            root / "prometheus", free_port(),
            ops_stack.config(targets, alertmanager=alertmanager_url, rule_file=None),
            ops_stack.rules(for_s=RULES_FOR_S))

    def stop(self) -> None:
        for process in (self.prometheus, self.alertmanager):
            if process is not None:
                process.stop()


def missing() -> list[str]:
    """The binaries `--observe` needs that are not installed."""
    return [name for name in ("prometheus", "alertmanager") if ops_stack.binary(name) is None]


def start_alertmanager(root: Path) -> ops_stack.Process:
    return ops_stack.start_alertmanager(root / "alertmanager", free_port())


def shown_after(prometheus: str, expr: str, since: float, until: float) -> float | None:
    """Seconds from `since` to the first sample of `expr` (a counter) above its value at `since`;
    None when it did not rise before `until`."""
    params = {"query": expr, "start": f"{since - 2:.3f}", "end": f"{until:.3f}", "step": "1"}
    url = f"{prometheus}/api/v1/query_range?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as response:
        result = json.load(response)["data"]["result"]
    return first_rise([(float(ts), float(value)) for series in result for ts, value in series["values"]],
                      since)


def fired(prometheus: str, since: float, until: float) -> list[str]:
    """The healer's alerts that fired between `since` and `until` (Prometheus' ALERTS series)."""
    expr = f'max by (alertname) (max_over_time(ALERTS{{alertstate="firing"}}[{max(1, int(until - since))}s]))'
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr, "time": f"{until:.3f}"})
    with urllib.request.urlopen(url, timeout=10) as response:
        return sorted(series["metric"]["alertname"] for series in json.load(response)["data"]["result"])


def first_rise(samples: list[tuple[float, float]], since: float) -> float | None:
    """Seconds from `since` to the first (time, value) sample above the last one at or before `since`
    (0 where there is none: the series appeared later)."""
    samples = sorted(samples)
    before = [value for ts, value in samples if ts <= since and math.isfinite(value)]
    baseline = before[-1] if before else 0.0
    rose = [ts for ts, value in samples if ts > since and value > baseline]
    return round(rose[0] - since, 1) if rose else None


SETTLE_S = 3.0  # three of Prometheus's 1 s scrapes after the last fault, before its counts are asked for


def with_metrics(results: list[FaultResult], prometheus: str, until: float,
                 say: Callable[[str], None]) -> list[FaultResult]:
    """The results with when the healer's metrics counted each fault's incident and plan."""
    out = []
    for result in results:
        since = result.injected_wall
        if since is None:
            out.append(result)
            continue
        incident = None if result.category is None else shown_after(
            prometheus, f'sum(trainmedic_incidents_total{{category="{result.category}", status="open"}})',
            since, until)
        plan = None if result.action in (None, "alert") else shown_after(
            prometheus, f'sum(trainmedic_recovery_plans_total{{kind="{result.action}"}})', since, until)
        out.append(replace(result, metrics_incident_after_s=incident, metrics_plan_after_s=plan))
        say(f"metrics for {result.name}: incident counted {_after(incident)}, {result.action or 'no'} "
            f"plan counted {_after(plan)} after the fault (Prometheus, 1 s scrapes)")
    return out


def _after(value: float | None) -> str:
    return "never" if value is None else f"{value}s"
