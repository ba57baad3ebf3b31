"""A simulated cluster on this machine: detector, coordinator and one `trainmedic node` per simulated
node, each a real service on the real broker; the demo and `trainmedic run` use it, `local_deployment`
gives them a broker and a topic prefix, `close` stops it all (docs/run.md, docs/demo.md).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.recovery.coordinator.core.rendezvous import PORTS
from trainmedic.recovery.executor import rank_logs
from trainmedic.recovery.executor.forkserver import PRELOAD_ENV
from trainmedic.schemas.jobs import JobSpec, JobSubmitted

log = logging.getLogger(__name__)

ROOT_RANKS = ("the ranks run as root, the user who started this: they can read everything on this "
              "machine (a real node runs each job's as a uid of its own: `trainmedic node --job-uids "
              "61184-65519`)")


@dataclass(frozen=True)
class ClusterLayout:
    """Where a local cluster keeps its files: services' logs, configs and fault files under `root`;
    `home` is the TRAINMEDIC_HOME its services get, so each executor's state (its ledger) is
    `home/executor/NODE` and its ranks' files (logs, snapshots) `HOME-jobs/NODE/JOB/SUBMISSION`, the
    services' defaults. Its keys are `keys`, else `home/keys`."""

    root: Path
    home: Path
    keys: Path | None = None

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def node_dir(self, node: str) -> Path:
        return self.root / "nodes" / node

    def gpu_control(self, node: str) -> Path:
        return self.node_dir(node) / "gpu-faults"

    def agent_control(self, node: str) -> Path:
        return self.node_dir(node) / "agent-faults"

    def sysfs(self, node: str) -> Path:
        return self.node_dir(node) / "sys"

    def executor_dir(self, node: str) -> Path:
        return self.home / "executor" / node

    @property
    def rank_faults(self) -> Path:
        return self.root / "rank-faults.json"

    @property
    def keys_dir(self) -> Path:
        """The keys (coordinator, operator, one per node), made when missing; every service is told
        this folder, whatever its default."""
        return self.keys or self.home / "keys"

    def operator_key(self):
        """The operator key jobs and node events are signed with."""
        from trainmedic.recovery.keyring import OPERATOR, load_signing

        return load_signing(self.keys_dir, OPERATOR)


@dataclass
class LocalCluster:
    """Service processes of one local cluster, sharing the broker, a topic prefix and the keys folder."""

    layout: ClusterLayout
    bootstrap: str
    prefix: str
    nodes: tuple[str, ...]
    alertmanager: str | None = None  # when set, an alert bridge forwards incidents there
    credentials: Path | None = None  # the broker's role credentials (each service reads its own)
    node_args: tuple[str, ...] = ()  # more options of every `trainmedic node` (e.g. its admission policy)
    warm_preload: tuple[str, ...] = ()  # modules the nodes' warm launchers import besides torch (and
    #                                     besides those the user's TRAINMEDIC_WARM_PRELOAD names)
    # How long a node stopped with SIGTERM waits for its jobs to be moved off it: none by default, as
    # `close` stops the coordinator too and nothing would move them.
    leave_timeout_s: float = 0.0
    # Service (detector, coordinator, alerts, a node's name) -> the port it serves its metrics on.
    metrics_ports: dict[str, int] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    submissions: dict[str, str] = field(default_factory=dict)  # job -> the submission `submit` sent

    def submit(self, producer: EventProducer, settings: KafkaSettings, spec: JobSpec) -> JobSubmitted:
        """Submit `spec` to the jobs topic, signed with the operator's key; its submission is the one
        whose rank logs this cluster reads from now on."""
        submitted = self.layout.operator_key().sign(JobSubmitted(ts=time.time(), job=spec,
                                                                 deployment=settings.topics.prefix))
        producer.send(settings.topics.jobs, submitted, key=spec.id)
        producer.flush()
        self.submissions[spec.id] = submitted.submission
        return submitted

    def rank_logs(self, job: str, rank: int | None = None) -> list[rank_logs.RankLog]:
        """The rank logs on this machine of the submission of `job` this cluster submitted."""
        return rank_logs.find(self.layout.home, job, rank, self.submissions.get(job))

    def env(self) -> dict[str, str]:
        found = {} if self.credentials is None else {"TRAINMEDIC_CREDENTIALS_DIR": str(self.credentials)}
        return {
            **os.environ,
            **found,
            "TRAINMEDIC_KAFKA_BOOTSTRAP": self.bootstrap,
            "TRAINMEDIC_TOPIC_PREFIX": self.prefix,
            "TRAINMEDIC_HOME": str(self.layout.home),
            "TRAINMEDIC_COORDINATOR_KEYS_DIR": str(self.layout.keys_dir),
            "TRAINMEDIC_EXECUTOR_KEYS_DIR": str(self.layout.keys_dir),
            "TRAINMEDIC_DETECTOR_KEYS_DIR": str(self.layout.keys_dir),  # placements checked (detection.md)
            "TRAINMEDIC_DEMO_FAULTS": str(self.layout.rank_faults),
            "PYTHONUNBUFFERED": "1",
            # the ranks run as the user who started the cluster, root included (said by ROOT_RANKS)
            **({"TRAINMEDIC_EXECUTOR_RANKS_AS_ROOT": "true"} if os.geteuid() == 0 else {}),
            **({PRELOAD_ENV: ",".join(filter(None, (os.environ.get(PRELOAD_ENV), *self.warm_preload)))}
               if self.warm_preload else {}),
        }

    def prepare(self, detector_config: dict) -> None:
        """Files the services read: the keys, configs, fault files, a sysfs per node."""
        from trainmedic.recovery.keyring import COORDINATOR, OPERATOR, ensure_key, node_role

        self.layout.logs.mkdir(parents=True, exist_ok=True)
        for role in (COORDINATOR, OPERATOR, *(node_role(node) for node in self.nodes)):
            if (key_id := ensure_key(self.layout.keys_dir, time.time(), role)) is not None:
                log.info("generated the %s key %s in %s", role, key_id, self.layout.keys_dir)
        self.layout.rank_faults.write_text("[]")
        (self.layout.root / "detector.json").write_text(json.dumps(detector_config))
        coordinator = {"default_address": "127.0.0.1", "ack_timeout_s": 20, "nodes": [
            {"id": node, "switch": f"leaf-{i // 2}"} for i, node in enumerate(self.nodes)]}
        (self.layout.root / "coordinator.yaml").write_text(yaml.safe_dump(coordinator))
        for node in self.nodes:
            nic = self.layout.sysfs(node) / "class" / "net" / "ib0"
            nic.mkdir(parents=True, exist_ok=True)
            (nic / "operstate").write_text("up\n")
            (nic / "carrier").write_text("1\n")
            for control in (self.layout.gpu_control(node), self.layout.agent_control(node)):
                control.write_text("")

    def start_services(self) -> None:
        py = sys.executable
        self._start("detector", [py, "-m", "trainmedic.streams",  # app id: <prefix>detector, this run's own
                                 "--start", "earliest",  # the run's own topics: all of them is this run
                                 "--config", str(self.layout.root / "detector.json")])
        self._start("coordinator", [py, "-m", "trainmedic.recovery", "--config",
                                    str(self.layout.root / "coordinator.yaml")])
        for node in self.nodes:
            self._start(node, [
                py, "-m", "trainmedic.cli", "node", "--node", node, "--source", "synthetic",
                "--gpus-per-node", "2", "--gpu-control", str(self.layout.gpu_control(node)),
                "--agent-control", str(self.layout.agent_control(node)), "--links", "ib0",
                "--sysfs", str(self.layout.sysfs(node)), "--state-dir", str(self.layout.executor_dir(node)),
                "--stop-grace-s", "5", "--leave-timeout-s", f"{self.leave_timeout_s:g}", *self.node_args,
            ])
        if self.alertmanager:
            self._start("alerts", [py, "-m", "trainmedic.cli", "alerts", "--alertmanager", self.alertmanager])

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Until the detector reads the telemetry and every executor reads its commands."""
        marks = {"detector": "detector ready", "coordinator": "rebuilt from",
                 **{node: "commands from" for node in self.nodes},
                 **({"alerts": "alert bridge on"} if self.alertmanager else {})}
        deadline = time.monotonic() + timeout_s
        pending = dict(marks)
        while pending and time.monotonic() < deadline:
            for name, mark in list(pending.items()):
                self.check_alive(name)
                if mark in self.log_text(name):
                    del pending[name]
            time.sleep(0.3)
        if pending:
            raise RuntimeError(f"not ready after {timeout_s:.0f}s: {', '.join(pending)} "
                               f"(logs in {self.layout.logs})")

    def check_alive(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with code {proc.returncode}; its log ends:\n"
                               f"{self.log_text(name)[-2000:]}")

    def log_text(self, name: str) -> str:
        path = self.layout.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def rank_pids(self, node: str, job: str) -> dict[int, int]:
        """rank -> pid of the job's live ranks on `node`, from its executor's registry."""
        try:
            ranks = json.loads((self.layout.executor_dir(node) / "ranks.json").read_text())
        except (FileNotFoundError, ValueError):
            return {}
        return {r["rank"]: r["pid"] for r in ranks if r["job"] == job}

    def latest_rank_log(self, job: str) -> Path | None:
        logs = [log.path for log in self.rank_logs(job, rank=0)]
        return max(logs, key=lambda p: p.stat().st_mtime) if logs else None

    def close(self) -> None:
        """Stop every service: SIGTERM to all; once the coordinator is down nothing will move a
        leaving node's jobs, so a node still waiting gets its second SIGTERM (leave at once: its
        executor stops its ranks). A node killed instead would leave its ranks running."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for name in ("coordinator", "detector"):
            with contextlib.suppress(subprocess.TimeoutExpired, KeyError):
                self.procs[name].wait(max(0.1, deadline - time.monotonic()))
        for node in self.nodes:
            proc = self.procs.get(node)
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc in self.procs.items():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within 30s; killing it", name)
                proc.kill()
                proc.wait()

    def _start(self, name: str, argv: list[str]) -> None:
        if name in self.metrics_ports:
            argv = [*argv, "--metrics-port", str(self.metrics_ports[name])]
        out = open(self.layout.logs / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        # A session of its own: a Ctrl-C at the terminal reaches only the command that started the
        # cluster, which then stops the services in order (`close`).
        self.procs[name] = subprocess.Popen(argv, env=self.env(), stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        out.close()


@contextmanager
def local_deployment(prefix: str, say: Callable[[str], None], *, replacing: re.Pattern | None = None
                     ) -> Iterator[str]:
    """A broker's bootstrap address with the topics of `prefix` created and every role's ACLs on them
    granted: the broker TRAINMEDIC_KAFKA_BOOTSTRAP names, else the local one (`trainmedic broker start`),
    started here and stopped on exit unless it already ran. With `replacing` (a pattern that matches
    the prefixes such runs generate, e.g. the demo's DEMO_PREFIX), the topics and ACLs of earlier
    deployments under such prefixes are removed first: the latest one's stay to be looked at, and
    runs do not pile topics up on the broker."""
    from trainmedic.bus.admin import create_topics, grant_roles, wait_for_topics
    from trainmedic.bus.settings import KafkaSettings, home
    from trainmedic.local.broker import LocalBroker, broker_port

    broker = None
    try:
        bootstrap = os.environ.get("TRAINMEDIC_KAFKA_BOOTSTRAP")
        if not bootstrap:
            broker = LocalBroker(home(), port=broker_port())
            state, started = broker.start()
            say(f"broker {'started' if started else 'already running'} at {state.bootstrap}")
            bootstrap = state.bootstrap
            if not started:
                broker = None  # not ours to stop
        admin = KafkaSettings.from_env(role="admin", bootstrap=bootstrap, topic_prefix=prefix)
        if replacing:
            _remove_earlier(admin, replacing, say)
        wait_for_topics(admin, list(create_topics(admin)))  # leaders, before services look
        grant_roles(admin, prefix)  # each service as its own role, on these topics
        yield bootstrap
    finally:
        if broker is not None:
            broker.stop()
            say("broker stopped")


def _remove_earlier(admin, replacing: re.Pattern, say: Callable[[str], None]) -> None:
    from trainmedic.bus.admin import list_topics, remove_prefix

    prefixes = {match.group(0) for name in list_topics(admin) if (match := replacing.match(name))}
    prefixes.discard(admin.topic_prefix)
    if prefixes:
        deleted = sum(len(remove_prefix(admin, old)) for old in sorted(prefixes))
        say(f"deleted the {deleted} topics of {len(prefixes)} earlier run(s) ({replacing.pattern}): "
            "only the latest run's stay on the broker")


def free_port_pair() -> int:
    """A port p with p and p + 1 both free on loopback (a broker's controller listens on p + 1)."""
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        with socket.socket() as other:
            try:
                other.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two adjacent free ports on loopback")


EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
RENDEZVOUS_FLOOR = 20_000  # above the ports services are told to use (9092, 9090, 9093, 91xx, 29500)


def rendezvous_base(ephemeral: Path = EPHEMERAL) -> int:
    """The first of the PORTS a job's generations listen at on this machine (`JobSpec.master_port`), at
    random below the kernel's ephemeral range: there no connection's own port can take a generation's
    (a Kafka client's port in the range made rank 0's listen fail, the generation lost, its node blamed)."""
    try:
        low = int(ephemeral.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32_768  # Linux's default
    return random.randrange(RENDEZVOUS_FLOOR, max(RENDEZVOUS_FLOOR + 1, low - PORTS))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
