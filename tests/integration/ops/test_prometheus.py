"""A real Prometheus (Debian's package) scraping real services on loopback: the detector, the
coordinator, two nodes (agent, GPU producer and executor on one endpoint, scraped as `executor`)
and the alert bridge. Every query of the Grafana dashboard must parse and return series from
them, and the healer's own alert rules (compose/prometheus/rules.yml, their `for:` shortened to
1 s) must fire when their condition is produced, into the real Alertmanager the alert tests run.

What produces the data: a job (`sleep` ranks) on both nodes; an Xid 79 on one node (gpu_lost:
an incident, its detection delay, the node isolated, which reaches the isolation cap of a
two-node cluster, a reconfigure plan whose commands the other node acknowledges, and its
time to acknowledged); a message on a telemetry topic that is not an event (a dead letter).
A standby coordinator beside the leader must not count as a reached isolation cap, and no rule but
those the test provokes may fire once the job runs. Then the detector is stopped: TrainmedicDetectorDown.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.demo.cluster import DemoLayout
from trainmedic.local import ops_stack
from trainmedic.local.cluster import LocalCluster, free_port
from trainmedic.schemas import JobSpec, JobSubmitted

pytestmark = pytest.mark.kafka

DASHBOARD = ROOT / "compose" / "grafana" / "dashboards" / "trainmedic.json"
NODES = ("pm0", "pm1")


def dashboard_queries() -> list[tuple[str, str]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(panel["title"], target["expr"]) for panel in panels for target in panel.get("targets", [])]


def query(prometheus: str, expr: str) -> list[dict]:
    """The instant vector `expr` gives now; raises on a query Prometheus cannot parse."""
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]["result"]


def answered(result: list[dict]) -> bool:
    """Series, at least one with a number (a quantile of no observations is NaN: no data on a panel)."""
    return any(math.isfinite(float(series["value"][1])) for series in result)


def alerts(prometheus: str) -> dict[str, str]:
    """alertname -> state (pending, firing) of the rules' active alerts."""
    with urllib.request.urlopen(f"{prometheus}/api/v1/alerts", timeout=5) as response:
        return {a["labels"]["alertname"]: a["state"] for a in json.load(response)["data"]["alerts"]}


def fired_since(prometheus: str, since: float) -> set[str]:
    """The alerts that fired at any time since `since` (wall clock; Prometheus' ALERTS series)."""
    expr = f'max_over_time(ALERTS{{alertstate="firing"}}[{math.ceil(time.time() - since)}s])'
    return {series["metric"]["alertname"] for series in query(prometheus, expr)}


def in_alertmanager(alertmanager: str) -> set[str]:
    with urllib.request.urlopen(f"{alertmanager}/api/v2/alerts?active=true", timeout=5) as response:
        return {a["labels"]["alertname"] for a in json.load(response)}


def quick_rules() -> dict:
    """The shipped rules, each firing after 1 s, but a service down only after 5 s of failed scrapes:
    a scrape that timed out once (1 s here) on two busy cores is not a service down (a CI run saw
    TrainmedicCoordinatorDown fire so on a healthy cluster); the shipped rules wait a minute."""
    rules = ops_stack.rules(for_s=1)
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule["expr"].startswith("up{"):
                rule["for"] = "5s"
    return rules


def wait_until(done, timeout_s: float, what) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, what()
        time.sleep(0.5)


def test_prometheus_answers_every_dashboard_query_and_fires_the_healers_alerts(
        kafka: KafkaSettings, alertmanager: str, tmp_path: Path) -> None:
    if ops_stack.binary("prometheus") is None:
        pytest.fail(f"prometheus is not installed: run {ops_stack.HOW_TO_GET}; this test never skips")
    ports = {name: free_port() for name in ("detector", "coordinator", "standby", "alerts", *NODES)}
    cluster = LocalCluster(DemoLayout(tmp_path / "demo"), kafka.bootstrap, kafka.topic_prefix, NODES,
                           alertmanager, metrics_ports=ports,
                           node_args=("--allowed-executables", "sleep"))  # ranks that just run
    cluster.prepare({})
    targets = {"detector": [f"127.0.0.1:{ports['detector']}"],
               "coordinator": [f"127.0.0.1:{ports['coordinator']}", f"127.0.0.1:{ports['standby']}"],
               "executor": [f"127.0.0.1:{ports[node]}" for node in NODES],
               "alerts": [f"127.0.0.1:{ports['alerts']}"]}
    prometheus = standby = None
    try:
        cluster.start_services()
        prometheus = ops_stack.start_prometheus(
            tmp_path / "prometheus", free_port(),
            ops_stack.config(targets, alertmanager=alertmanager, rule_file=None), quick_rules())
        url = prometheus.url
        cluster.wait_ready()
        spec = JobSpec(id="pm", nodes=NODES, throughput={1: 1e14, 2: 2e14}, command=("sleep", "600"))
        with EventProducer(kafka) as producer:
            producer.send(kafka.topics.jobs, cluster.layout.operator_key().sign(
                JobSubmitted(ts=time.time(), job=spec, deployment=kafka.topic_prefix)), key=spec.id)
        wait_until(lambda: answered(query(url, 'trainmedic_jobs{state="running"} == 1')), 30,
                   lambda: f"the job never ran: {cluster.layout.logs}")
        # A second coordinator, started once the first leads: a standby, which holds no state.
        with open(cluster.layout.logs / "standby.log", "ab") as log:
            standby = subprocess.Popen([sys.executable, "-m", "trainmedic.recovery", "--config",
                                        str(cluster.layout.root / "coordinator.yaml"),
                                        "--metrics-port", str(ports["standby"])],
                                       env=cluster.env(), stdout=log, stderr=subprocess.STDOUT)
        standby_leading = f'trainmedic_coordinator_leading{{instance="127.0.0.1:{ports["standby"]}"}} == 0'
        wait_until(lambda: answered(query(url, standby_leading)), 30, lambda: "the standby was never scraped")
        assert answered(query(url, "sum(trainmedic_coordinator_leading) == 1"))
        cap = next(rule["expr"] for group in ops_stack.rules()["groups"] for rule in group["rules"]
                   if rule["alert"] == "TrainmedicIsolationCapReached")
        assert query(url, cap) == []  # nothing isolated yet: the standby's gauge is no reached cap
        running = time.time()  # the cluster whole: from here only what the test produces may alert
        with cluster.layout.gpu_control(NODES[1]).open("a") as control:
            control.write(f"xid=79,gpu=0,node={NODES[1]}\n")
        with EventProducer(kafka) as producer:
            producer.send(kafka.topics.gpu, b"not an event", key=NODES[0])

        queries = dashboard_queries()
        assert len(queries) == 24
        wait_until(lambda: all(answered(query(url, expr)) for _, expr in queries), 45, lambda: (
            "panels without data: " + "; ".join(f"{title}: {expr}" for title, expr in queries
                                                if not answered(query(url, expr)))))
        assert answered(query(url, "trainmedic_coordinator_leading == 1"))
        # and what was produced shows as such, not only as series at 0
        wait_until(lambda: all(answered(query(url, expr)) for expr in (
            'sum(trainmedic_nodes{state="isolated"}) == 1',
            'sum(trainmedic_open_incidents{severity="SEV1"}) >= 1',
            'sum(rate(trainmedic_incidents_total{status="open", category="gpu_lost"}[5m])) > 0',
            'sum by (service) (rate(trainmedic_dead_letters_total{service="detector"}[5m])) > 0',
            'sum by (kind) (rate(trainmedic_recovery_plans_total{kind="reconfigure"}[5m])) > 0',
            'sum by (status) (rate(trainmedic_executor_acks_total{status="done"}[5m])) > 0')), 10,
            lambda: "a produced event does not show")
        produced = {"TrainmedicIsolationCapReached", "TrainmedicDeadLetters"}
        wait_until(lambda: produced <= {name for name, state in alerts(url).items() if state == "firing"}, 20,
                   lambda: alerts(url))
        # and no other rule fired on this healthy cluster since it ran its job
        assert fired_since(url, running) == produced

        cluster.procs["detector"].terminate()
        cluster.procs["detector"].wait(timeout=30)
        wait_until(lambda: alerts(url).get("TrainmedicDetectorDown") == "firing", 20, lambda: alerts(url))
        wait_until(lambda: "TrainmedicDetectorDown" in in_alertmanager(alertmanager), 20,
                   lambda: in_alertmanager(alertmanager))
        assert {"TrainmedicIsolationCapReached", "TrainmedicDeadLetters"} <= in_alertmanager(alertmanager)
    finally:
        if standby is not None:  # first: it would take the lease once the coordinator stops
            standby.terminate()
            try:
                standby.wait(timeout=30)
            except subprocess.TimeoutExpired:
                standby.kill()
                standby.wait()
        if prometheus is not None:
            prometheus.stop()
        cluster.close()
