"""trainmedic deployed on the bed the way docs/deployment.md says: a broker host, a control host, node
hosts, and the machine itself as the operator's host; each host with a TRAINMEDIC_HOME of its own
holding only the files the document sends it. `Site` is what outlives one test (the hosts, the broker,
the keys); `Cluster` is one test's deployment under a topic prefix of its own (its services, its job).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.multihost.bed import Bed
from trainmedic.bus.reader import NOW, TopicReader
from trainmedic.bus.settings import KafkaSettings

BROKER_PORT = 9092
OPERATOR = "operator"  # the machine: the bed's gateway address
CONTROL = ("control", "standby")  # the detector and a coordinator; a second coordinator (HA)
# The roles each control-plane host is invited to (docs/deployment.md, step 3): it joins with a token.
INVITED = {"control": ("detector", "coordinator"), "standby": ("coordinator",), OPERATOR: ("operator",)}
CLI = [sys.executable, "-m", "trainmedic.cli"]


def clean_env() -> dict[str, str]:
    """This process's environment without any trainmedic setting (the suite's own broker's)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TRAINMEDIC_")}


@dataclass
class Site:
    """The bed's hosts with trainmedic installed: `brokers` run the broker (one, or a cluster's
    members), `control` the detector and a coordinator, `standby` a second coordinator where a test
    wants one, `nodes` each a `trainmedic node`."""

    bed: Bed
    nodes: tuple[str, ...]
    brokers: tuple[str, ...] = ("kafka",)
    bootstrap: str = ""

    def home(self, host: str) -> Path:
        return self.bed.root / "hosts" / host

    def env(self, host: str, **more: str) -> dict[str, str]:
        return {**clean_env(), "TRAINMEDIC_HOME": str(self.home(host)), "PYTHONUNBUFFERED": "1", **more}

    def cli(self, host: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120.0) -> str:
        """A `trainmedic` command run to its end on `host` (the operator's: on the machine itself)."""
        env = env or self.env(host)
        if host == OPERATOR:
            done = subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=timeout)
        else:
            done = self.bed.run(host, [*CLI, *args], env, timeout)
        if done.returncode != 0:
            raise RuntimeError(f"trainmedic {' '.join(args)} on {host}: exit {done.returncode}\n"
                               f"{done.stdout[-2000:]}{done.stderr[-3000:]}")
        return done.stdout

    def build(self) -> None:
        """Hosts and broker, then docs/deployment.md's step 3: each control-plane host and the
        operator's join with a token of `broker invite` (nothing copied to them), the coordinators'
        hosts sync the keys trusted after them. The nodes n1.. are set up the old way (`broker
        add-node`, their keys trusted by hand on the control hosts) so that every test has its
        cluster from the config; they take the coordinators' keys by `keys sync`."""
        for host in (*self.brokers, *CONTROL, *self.nodes):
            self.bed.add(host)
            self.home(host).mkdir(parents=True)
        self.home(OPERATOR).mkdir(parents=True)
        self.start_brokers()
        first = self.brokers[0]
        self.cli(first, "topics", "create")  # the default deployment's, which the registrar serves here
        registrar = self.bed.spawn(first, [*CLI, "broker", "registrar"], self.env(first), "registrar-site")
        try:
            deadline = time.monotonic() + 120
            while "registrar ready on" not in (said := self.bed.log("registrar-site")):
                if registrar.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the registrar did not start:\n{said[-3000:]}")
                time.sleep(0.2)
            for host, roles in INVITED.items():
                self.join(host, *roles)
            for node in self.nodes:
                self.add_node(node)
                self.cli(node, "keys", "generate", "--node", node)
                self.trust(node, "--node", node)
            for host in (*CONTROL, *self.nodes):  # the keys trusted after each joined
                self.cli(host, "keys", "sync", "--bootstrap", self.bootstrap)
        finally:
            registrar.terminate()
            registrar.wait(30)

    def join(self, host: str, *roles: str) -> None:
        """`broker invite ROLES` on the broker's host, then `trainmedic join @TOKEN_FILE` on `host`."""
        token = self.cli(self.brokers[0], "broker", "invite", *roles).strip().splitlines()[-1]
        path = self.home(host) / "token"
        path.write_text(token + "\n")
        path.chmod(0o600)
        self.cli(host, "join", f"@{path}", "--bootstrap", self.bootstrap)
        path.unlink()

    def start_brokers(self) -> None:
        """One broker, or a cluster: `broker init` on the first member, its shared folder copied to
        the others, then every member's `broker start --node-id N` at once (each waits for a majority)."""
        first = self.brokers[0]
        if len(self.brokers) == 1:
            address = self.bed.hosts[first].address
            out = self.cli(first, "broker", "start", "--listen", f"{address}:{BROKER_PORT}", timeout=240)
            self.bootstrap = out.strip().splitlines()[-1]
            return
        members = ",".join(f"{i}@{self.bed.hosts[host].address}:{BROKER_PORT}"
                           for i, host in enumerate(self.brokers, 1))
        self.cli(first, "broker", "init", "--members", members)
        shared = self.home(first) / "broker" / "cluster"
        for host in self.brokers[1:]:
            (self.home(host) / "broker").mkdir(mode=0o700)
            shutil.copytree(shared, self.home(host) / "broker" / "cluster")
        starting = [self.bed.spawn(host, [*CLI, "broker", "start", "--node-id", str(i)], self.env(host),
                                   f"broker-start-{host}") for i, host in enumerate(self.brokers, 1)]
        for host, proc in zip(self.brokers, starting, strict=True):
            if proc.wait(300) != 0:
                raise RuntimeError(f"broker start on {host}: exit {proc.returncode}\n"
                                   f"{self.bed.log(f'broker-start-{host}')[-3000:]}")
        self.bootstrap = self.bed.log(f"broker-start-{first}").strip().splitlines()[-1]

    def add_node(self, node: str) -> None:
        """`broker add-node` on the broker's host, and the folder it makes copied to the node's
        credentials folder (its role files, the CA, its telemetry key; nothing else)."""
        made = Path(self.cli(self.brokers[0], "broker", "add-node", node).strip().splitlines()[-1])
        to = self.home(node) / "credentials"
        shutil.rmtree(to, ignore_errors=True)
        shutil.copytree(made, to)

    def restart_broker(self, host: str) -> None:
        """A cluster member's broker started again (after `bed.kill`)."""
        self.cli(host, "broker", "start", "--node-id", str(self.brokers.index(host) + 1), timeout=300)

    def trust(self, host: str, *role: str, hosts: tuple[str, ...] = CONTROL) -> None:
        """`host`'s own public key trusted on `hosts` (the control hosts) for `role`."""
        for pub in public_keys(self.home(host)):
            shutil.copy2(pub, self.bed.root / pub.name)
            for control in hosts:
                self.cli(control, "keys", "trust", str(self.bed.root / pub.name), *role)

    def close(self) -> None:
        for host in self.brokers:
            with contextlib.suppress(Exception):
                self.cli(host, "broker", "stop", timeout=60)


def public_keys(home: Path) -> list[Path]:
    return sorted((home / "keys").glob("*.pub"))


@dataclass
class Cluster:
    """One test's deployment: topics under a prefix of its own, the control host's detector and
    coordinator, a `trainmedic node` on each node host."""

    site: Site
    prefix: str = field(default_factory=lambda: f"mh{uuid.uuid4().hex[:8]}.")
    coordinator: dict = field(default_factory=dict)  # more of the coordinator's settings
    standby: bool = False  # a second coordinator on the standby host
    node_services: bool = True  # a `trainmedic node` on each node host (else a test starts them)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    stopped: set[str] = field(default_factory=set)  # services a test ended on purpose

    def env(self, host: str) -> dict[str, str]:
        more = {"TRAINMEDIC_TOPIC_PREFIX": self.prefix}
        if host not in (*CONTROL, *self.site.brokers, OPERATOR):  # a node host, enrolled ones too
            more["TRAINMEDIC_EXECUTOR_RANKS_AS_ROOT"] = "true"  # the test runs as root, no job uids here
        return self.site.env(host, **more)

    @property
    def root(self) -> Path:
        return self.site.bed.root / self.prefix.rstrip(".")

    def settings(self) -> KafkaSettings:
        """The operator's view: what a test reads the topics with."""
        return KafkaSettings.from_env(self.env(OPERATOR), role=OPERATOR)

    def start(self) -> None:
        """Topics, then the control host's services, then the nodes; until each is ready."""
        self.root.mkdir()
        first = self.site.brokers[0]
        self.site.cli(first, "topics", "create", env=self.env(first))
        addresses = {node: self.site.bed.hosts[node].address for node in self.site.nodes}
        config = self.root / "coordinator.yaml"
        config.write_text(yaml.safe_dump({"ack_timeout_s": 20, **self.coordinator, "nodes": [
            {"id": node, "address": address} for node, address in addresses.items()]}))
        self.spawn("control", "detector", "detector", "--start", "earliest")
        self.spawn("control", "coordinator", "coordinator", "--config", str(config))
        if self.standby:
            self.wait(lambda: "leading at epoch" in self.log("coordinator"), 120, "the coordinator to lead")
            self.spawn("standby", "standby", "coordinator", "--config", str(config))
        nodes = self.site.nodes if self.node_services else ()
        for node in nodes:
            self.spawn(node, node, *self.node_args(node))
        marks = {"detector": "detector ready", "coordinator": "rebuilt from",
                 **({"standby": "standby: another coordinator holds"} if self.standby else {}),
                 **{node: "joined (announced on" for node in nodes}}
        self.wait(lambda: all(mark in self.log(name) for name, mark in marks.items()), 180, "services ready")

    def node_args(self, node: str) -> list[str]:
        """`trainmedic node`'s arguments on host `node`: synthetic GPUs, a link of its own to watch."""
        self.make_sysfs(node)
        return ["node", "--node", node, *self.node_options(node), "--data-address",
                self.site.bed.hosts[node].address]

    def make_sysfs(self, node: str) -> None:
        """The link `trainmedic node` on `node` watches: up."""
        sysfs = self.root / node / "sys" / "class" / "net" / "eth0"
        sysfs.mkdir(parents=True, exist_ok=True)
        (sysfs / "operstate").write_text("up\n")
        (sysfs / "carrier").write_text("1\n")

    def node_options(self, folder: str) -> list[str]:
        """The options every node's `trainmedic node` takes here, its files under the deployment's
        `folder` (the node's name, or "{node}" where each node fills its name in)."""
        return ["--source", "synthetic", "--gpus-per-node", "1",
                "--links", "eth0", "--sysfs", str(self.root / folder / "sys"), "--stop-grace-s", "5",
                "--leave-timeout-s", "0", "--state-dir", str(self.root / folder / "executor"),
                # what the tests' jobs run: this Python, `-m` from the deployment's folder
                "--allowed-executables", sys.executable, "--allowed-script-dirs", str(self.root),
                "--jobs-dir", str(self.root / folder / "jobs")]

    def spawn(self, host: str, name: str, *args: str) -> None:
        self.procs[name] = self.site.bed.spawn(host, [*CLI, *args], self.env(host), f"{self.prefix}{name}")

    def log(self, name: str) -> str:
        return self.site.bed.log(f"{self.prefix}{name}")

    def wait(self, check, timeout_s: float, what: str):
        """`check()`'s first truthy value; a service that exits, or the time out, fails the test."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None and name not in self.stopped:
                    raise AssertionError(f"{name} exited ({proc.returncode}) waiting for {what}:\n"
                                         f"{self.log(name)[-3000:]}")
            if value := check():
                return value
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what} (logs in "
                             f"{self.site.bed.root / 'logs'})")

    def submit(self, spec: dict) -> None:
        path = self.root / f"{spec['id']}.yaml"
        path.write_text(yaml.safe_dump(spec))
        self.site.cli(OPERATOR, "job", "submit", str(path), "--no-local-check", env=self.env(OPERATOR))

    def records(self, *suffixes: str) -> list:
        """The valid records of the topics `suffixes` (default incidents and recovery), as of now."""
        settings = self.settings()
        topics = [settings.topics.name(s) for s in suffixes or ("incidents", "recovery")]
        with TopicReader(settings, topics, end=NOW, validate=True) as reader:
            return [r for batch in reader.batches() for r in batch if hasattr(r, "event")]

    def events(self, *suffixes: str) -> list:
        return [r.event for r in self.records(*suffixes)]

    def rank_logs(self, job: str, rank: int) -> list[Path]:
        return sorted(self.root.glob(f"*/jobs/{job}/*/logs/g*-rank{rank}.log"))

    def rank_pid(self, node: str, job: str) -> int | None:
        """The pid of `job`'s rank on `node`, from its executor's record of its ranks."""
        try:
            ranks = json.loads((self.root / node / "executor" / "ranks.json").read_text())
        except (FileNotFoundError, ValueError):
            return None
        return next((r["pid"] for r in ranks if r["job"] == job), None)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
