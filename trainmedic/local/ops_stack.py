"""Prometheus and Alertmanager on this machine, without Docker: Debian's packages (from PATH, or
`make prometheus`'s `.trainmedic/prometheus`) run as processes with a generated config
(docs/demo.md, "With Prometheus and Alertmanager (`--observe`)"; docs/metrics.md).
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

CHECKOUT = Path(__file__).resolve().parents[2]
RULES = CHECKOUT / "compose" / "prometheus" / "rules.yml"
UNPACKED = CHECKOUT / ".trainmedic" / "prometheus" / "usr" / "bin"
HOW_TO_GET = ("make prometheus alertmanager (Debian's prometheus, unpacked into .trainmedic/prometheus, "
              "and apt-get install prometheus-alertmanager)")
_NAMES = {"prometheus": ("prometheus",), "promtool": ("promtool",),
          "alertmanager": ("prometheus-alertmanager", "alertmanager")}


def binary(name: str) -> Path | None:
    """`prometheus`, `promtool` or `alertmanager`: on PATH, else unpacked by `make prometheus` into
    the checkout's `.trainmedic/prometheus` (a tool like `.venv`, so not under a TRAINMEDIC_HOME
    that a test or a demo run points elsewhere)."""
    for candidate in _NAMES[name]:
        found = shutil.which(candidate) or shutil.which(candidate, path=str(UNPACKED))
        if found:
            return Path(found)
    return None


def rules(for_s: float | None = None) -> dict:
    """The shipped alerting rules (compose/prometheus/rules.yml); with `for_s`, every rule's `for:`
    set to it (seconds), so that a test or the demo sees them fire in seconds."""
    doc = yaml.safe_load(RULES.read_text())
    if for_s is not None:
        for group in doc["groups"]:
            for rule in group["rules"]:
                rule["for"] = f"{for_s:g}s"
    return doc


def config(targets: dict[str, list[str]], *, alertmanager: str | None, rule_file: Path | None,
           interval_s: float = 1.0) -> dict:
    """A Prometheus config: each job's `host:port` targets scraped, rules evaluated every `interval_s`."""
    out: dict = {
        "global": {"scrape_interval": f"{interval_s:g}s", "evaluation_interval": f"{interval_s:g}s",
                   "scrape_timeout": f"{interval_s:g}s"},
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": hosts}]}
                           for job, hosts in targets.items()],
    }
    if rule_file is not None:
        out["rule_files"] = [str(rule_file)]
    if alertmanager is not None:
        address = alertmanager.removeprefix("http://").rstrip("/")
        out["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [address]}]}]}
    return out


@dataclass
class Process:
    """A started Prometheus or Alertmanager: its URL, process and log."""

    name: str
    url: str
    proc: subprocess.Popen
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_prometheus(workdir: Path, port: int, settings: dict, rules_doc: dict | None = None,
                     timeout_s: float = 30.0) -> Process:
    """Prometheus on 127.0.0.1:`port` with `settings` (see `config`; its rule file is written from
    `rules_doc`), its data in `workdir`; returns once it answers ready."""
    workdir.mkdir(parents=True, exist_ok=True)
    if rules_doc is not None:
        (workdir / "rules.yml").write_text(yaml.safe_dump(rules_doc, sort_keys=False))
        settings = {**settings, "rule_files": [str(workdir / "rules.yml")]}
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(settings, sort_keys=False))
    return _start("prometheus", workdir, port, [
        f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}"], timeout_s)


ALERTMANAGER_CONFIG = {"route": {"receiver": "ui-only", "group_by": ["alertname"], "group_wait": "1s"},
                       "receivers": [{"name": "ui-only"}]}


def start_alertmanager(workdir: Path, port: int, timeout_s: float = 30.0) -> Process:
    """Alertmanager on 127.0.0.1:`port`, alerts kept in its UI only, its data in `workdir`."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "alertmanager.yml").write_text(yaml.safe_dump(ALERTMANAGER_CONFIG))
    return _start("alertmanager", workdir, port, [
        f"--config.file={workdir / 'alertmanager.yml'}", f"--storage.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="], timeout_s)


def _start(name: str, workdir: Path, port: int, args: list[str], timeout_s: float) -> Process:
    path = binary(name)
    if path is None:
        raise RuntimeError(f"{name} is not installed: {HOW_TO_GET}")
    log = workdir / f"{name}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(path), *args], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    running = Process(name, f"http://127.0.0.1:{port}", proc, log)
    deadline = time.monotonic() + timeout_s
    while not _ready(running.url):
        if proc.poll() is not None or time.monotonic() > deadline:
            running.stop()
            raise RuntimeError(f"{name} did not get ready in {timeout_s:g}s: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    return running


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False
