"""The local Apache Kafka broker: jars from Maven Central, KRaft combined mode on 127.0.0.1 (or the
address it is told to listen on, then with TLS), a single node or one member of a cluster, secure by
default (SCRAM, ACLs per role), its connections capped and its principals' byte rates bounded
(docs/security.md, "Broker authentication and ACLs", "A cluster of brokers", "The broker protects itself").
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from trainmedic.bus import credentials, telemetry_keys
from trainmedic.bus.acls import ADMIN, GRANTS, RETIRED
from trainmedic.bus.admin import grant_roles, retire_users, set_scram_users, wait_for_broker
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import BrokerError, ConfigError, KafkaError, TrainmedicError
from trainmedic.common.signals import alive
from trainmedic.local import broker_auth, broker_cluster, broker_limits, broker_tls
from trainmedic.local.broker_cluster import Member
from trainmedic.local.broker_config import LOG4J, cluster_id, server_properties
from trainmedic.local.broker_limits import QUOTAS, Connections, Quota
from trainmedic.local.broker_listen import DEFAULT_PORT, PLAINTEXT_OFF_LOOPBACK, BrokerState, Listener
from trainmedic.local.broker_process import accepts, port_free, ready, tail
from trainmedic.schemas import DEFAULT_PREFIX

log = logging.getLogger(__name__)

POM = Path(__file__).resolve().parents[2] / "compose" / "pom.xml"
HEAP = "-Xmx512m"
__all__ = ["DEFAULT_PORT", "INSECURE", "BrokerState", "Listener", "LocalBroker", "broker_port"]


def broker_port(env: Mapping[str, str] = os.environ) -> int:
    """The local broker's client port: TRAINMEDIC_BROKER_PORT, else 9092 (the controller's is the next)."""
    value = env.get("TRAINMEDIC_BROKER_PORT") or str(DEFAULT_PORT)
    if not value.isdigit() or not 1 <= int(value) < 65535:
        raise ConfigError(f"TRAINMEDIC_BROKER_PORT={value!r}: give a port from 1 to 65534")
    return int(value)


INSECURE = ("INSECURE: the broker runs without authentication or ACLs: any program that reaches "
            "{where} may read, write and delete every topic")


class LocalBroker:
    """One broker whose files live in `home` (TRAINMEDIC_HOME), on loopback at `port` or at `listener` (then
    `port` is not used): a single node, or the cluster's `member`; TLS from `tls_files`, else a CA of its
    own (a member's: the cluster's). Methods are idempotent.

    Layout under `home`:
      kafka/libs/         the jars of compose/pom.xml (fetched once with Maven)
      broker/server.properties, broker/data/, broker/broker.log, broker/broker.json (pid, addresses)
      broker/secrets.json the roles' passwords (0600)
      broker/quotas.json  the quotas last set, per cluster id (they live in the cluster's metadata)
      broker/tls/         a TLS broker's CA, certificate and key (broker_tls)
      broker/cluster/     a member's files shared with the cluster's other members (broker_cluster)
      credentials/ROLE.json each role's librdkafka settings (0600), while the broker is secure, and
                          a TLS broker's CA, ca.pem
    """

    def __init__(self, home: Path, port: int = DEFAULT_PORT, controller_port: int | None = None, *,
                 listener: Listener | None = None, tls_files: broker_tls.OperatorTls | None = None,
                 credentials_dir: Path | None = None, connections: Connections | None = None,
                 quotas: dict[str | None, Quota] = QUOTAS, member: Member | None = None):
        self.home = home
        self.member = member
        self.connections = connections or Connections.for_files(broker_limits.open_files())
        self.quotas = quotas
        self.credentials = credentials_dir or home / "credentials"
        self.listener = listener or Listener(port=port, controller_port=controller_port or 0)
        self.tls_files = tls_files
        self.port = self.listener.port
        self.controller_port = self.listener.controller_port
        self.libs = home / "kafka" / "libs"
        self.dir = home / "broker"
        self.state_file = self.dir / "broker.json"
        self.log_file = self.dir / "broker.log"
        self.secrets_file = self.dir / "secrets.json"
        self.quotas_file = self.dir / "quotas.json"
        self.tls_dir = self.dir / "tls"

    # -- inspection -------------------------------------------------------------------------

    def state(self) -> BrokerState | None:
        """The running broker's state, or None (a stale state file is removed)."""
        try:
            state = BrokerState(**json.loads(self.state_file.read_text()))
        except (FileNotFoundError, ValueError, TypeError):
            return None
        if alive(state.pid):
            return state
        self.state_file.unlink(missing_ok=True)
        return None

    # -- set-up -----------------------------------------------------------------------------

    def fetch_jars(self) -> None:
        """Copy the broker's jars from Maven Central (cached in ~/.m2) unless they are here."""
        stamp = self.libs / f".fetched-{_digest(POM)}"
        if stamp.exists():
            return
        _require("mvn", "Maven is needed to fetch the Kafka jars: install it (e.g. `apt-get install maven`)")
        shutil.rmtree(self.libs, ignore_errors=True)
        log.info("fetching the Apache Kafka jars with Maven (once)")
        cmd = [
            "mvn", "--quiet", "--batch-mode", "-f", str(POM), "dependency:copy-dependencies",
            "-DincludeScope=runtime", f"-DoutputDirectory={self.libs}",
        ]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            output = (done.stdout + done.stderr)[-3000:]
            raise BrokerError(f"Maven could not fetch the Kafka jars:\n{output}")
        stamp.touch()

    def write_config(self, passwords: dict[str, str] | None = None, listener: Listener | None = None) -> Path:
        """server.properties: secure with the roles' `passwords`, plain without; at `listener` (by
        default the broker's), its TLS files made or checked first when it is a TLS one."""
        self.make_private()
        listener = listener or self.listener
        stores = None
        if listener.tls:
            if self.member and not self.tls_files:
                self.member.install_ca(self.tls_dir)
            stores = broker_tls.prepare(self.tls_dir, listener.names, datetime.now(UTC), self.tls_files)
        path = self.dir / "server.properties"
        broker_auth.write_private(path, server_properties(self.dir / "data", listener, passwords=passwords,
                                                          connections=self.connections, tls=stores,
                                                          quorum=self.member and self.member.quorum))
        (self.dir / "log4j.properties").write_text(LOG4J)
        return path

    def make_private(self) -> None:
        """The broker's folder, its data and its log its owner's only; a folder made before this
        (0755, topics and SCRAM hashes readable by every local user) is fixed here, at each start."""
        for folder in (self.dir, self.dir / "data"):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            folder.chmod(0o700)
        self.log_file.touch(mode=0o600)
        self.log_file.chmod(0o600)

    @property
    def ca(self) -> Path | None:
        """The CA a TLS broker's clients trust (None: no TLS)."""
        return self.tls_dir / "ca.pem" if self.listener.tls else None

    @property
    def formatted(self) -> bool:
        return (self.dir / "data" / "meta.properties").exists()

    def format_storage(self, config: Path, passwords: dict[str, str] | None = None) -> None:
        """Format the KRaft log directory on first use (with the admin's SCRAM credential when
        `passwords` are given); later starts reuse it."""
        if self.formatted:
            return
        made = self.member.cluster.cluster_id if self.member else cluster_id()
        scram = broker_auth.add_scram_argument(passwords) if passwords else []
        done = subprocess.run(
            self._java("kafka.tools.StorageTool", "format", "-t", made, "-c", str(config), *scram),
            capture_output=True, text=True,
        )
        if done.returncode != 0:
            raise BrokerError(f"formatting Kafka storage failed:\n{done.stdout}{done.stderr}")

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, timeout_s: float = 90.0, *, secure: bool = True,
              prefixes: tuple[str, ...] = (DEFAULT_PREFIX,)) -> tuple[BrokerState, bool]:
        """Start in the background and wait until clients are accepted. Secure: every role's SCRAM
        user, its ACLs for `prefixes` and its credentials file exist once this returns; plain
        (`secure=False`): no authentication, no authorizer, and no credentials files.

        Returns the state and whether this call started it (False: it was already running).
        """
        running = self.state()
        if running is not None:
            refused = broker_cluster.refusal(running, self.member)
            if refused:
                raise BrokerError(refused)
            if running.secure != secure:
                raise BrokerError(f"the broker runs {'secure' if running.secure else 'plain'} already "
                                  f"(pid {running.pid}): `trainmedic broker stop` first to start it "
                                  f"{'secure' if secure else 'plain'}")
            if not running.same_place(self.listener):
                tls = {True: " with TLS", False: ""}
                raise BrokerError(f"the broker runs at {running.bootstrap}{tls[running.tls]} already (pid "
                                  f"{running.pid}): `trainmedic broker stop` first to start it at "
                                  f"{self.listener.bootstrap}{tls[self.listener.tls]}")
            return running, False
        if self.member and not secure:
            raise BrokerError("a cluster's member runs secure: not with --insecure")
        if self.listener.tls and not secure:
            raise BrokerError("--insecure runs without authentication, and so without TLS: not with --tls, "
                              "and off loopback only with --plaintext")
        _require("java", "Java 17 or newer is needed to run Kafka: install a JDK "
                 "(e.g. `apt-get install openjdk-17-jre-headless`)")
        for port in (self.port, self.controller_port):
            if not port_free(self.listener.host, port):
                raise BrokerError(
                    f"port {port} on {self.listener.host} is taken by another program; pick other ports "
                    f"with --port or --listen (or TRAINMEDIC_BROKER_PORT)"
                )
        self.fetch_jars()
        self._log_warnings(secure)
        if not secure:
            credentials.clear(self.credentials)
            self.format_storage(self.write_config())
            state = self._launch(False, timeout_s)
            self._limit(None)
            return state, True
        if self.member:
            self.member.check_storage(self.dir / "data")
        passwords = self.member.secrets() if self.member else self._own_passwords(timeout_s)
        self.format_storage(self.write_config(passwords), passwords)
        state = self._launch(True, timeout_s)
        try:
            self._authorize(passwords, prefixes)
            self._limit(passwords[ADMIN])
        except TrainmedicError:
            self.stop()
            raise
        return state, True

    def _log_warnings(self, secure: bool) -> None:
        """Say in the broker's log what it runs without: authentication (--insecure), TLS off loopback."""
        where = self.listener.listen
        warnings = [] if secure else [INSECURE.format(where=where)]
        if not (self.listener.tls or self.listener.loopback):
            warnings.append(PLAINTEXT_OFF_LOOPBACK.format(where=where))
        self.make_private()
        with open(self.log_file, "a") as out:
            out.writelines(f"WARNING {warning}\n" for warning in warnings)

    def _own_passwords(self, timeout_s: float) -> dict[str, str]:
        """A single broker's passwords: those in broker/secrets.json, made there when missing."""
        found = broker_auth.read_secrets(self.secrets_file)
        passwords = broker_auth.complete(found or {})
        if self.formatted and found is None:
            self._add_users(passwords, timeout_s)
        if passwords != found:
            self.dir.mkdir(parents=True, exist_ok=True)
            broker_auth.write_private(self.secrets_file, json.dumps(passwords, indent=2))
        return passwords

    def _add_users(self, passwords: dict[str, str], timeout_s: float) -> None:
        """Storage formatted before the broker was secure: start it plain once (no authorizer) to
        add the SCRAM users, keeping its topics; the secure start follows."""
        log.warning("storage in %s predates authentication: adding the SCRAM users with one plain start "
                    "on loopback", self.dir / "data")
        loopback = Listener(port=self.port, controller_port=self.controller_port)
        self.write_config(listener=loopback)
        self._launch(False, timeout_s, loopback)
        try:
            plain = KafkaSettings(bootstrap=loopback.bootstrap)
            wait_for_broker(plain, timeout_s)
            set_scram_users(plain, {name: passwords[name] for name in (*GRANTS, ADMIN)})
        finally:
            self.stop()

    def _authorize(self, passwords: dict[str, str], prefixes: tuple[str, ...]) -> None:
        """The roles' SCRAM users, their ACLs for `prefixes`, and their credentials files."""
        ca = self.ca
        config = broker_auth.role_config(ADMIN, passwords[ADMIN], ca=str(ca) if ca else None)
        password = config.pop("sasl.password")
        admin = KafkaSettings(bootstrap=self.listener.bootstrap, extra=config,
                              secrets={"sasl.password": password})
        wait_for_broker(admin, 60.0)
        for attempt in (1, 2, 3):  # each step is idempotent: every member of a cluster takes them all
            try:
                set_scram_users(admin, {role: passwords[role] for role in GRANTS})
                retire_users(admin, RETIRED)
                for prefix in prefixes:
                    grant_roles(admin, prefix)
                break
            except KafkaError as err:  # a request in flight on the bootstrap connection, which librdkafka
                if err.code != "_DESTROY_BROKER" or attempt == 3:  # drops once it knows every broker
                    raise
                log.info("setting up users and ACLs again: %s", err)
        credentials.write_roles(self.credentials, {
            role: broker_auth.role_config(role, passwords[role], bootstrap=self.bootstrap,
                                          ca=credentials.CA_FILE if ca else None)
            for role in (*GRANTS, ADMIN)}, ca.read_bytes() if ca else None)
        master = broker_auth.telemetry_master(passwords)
        telemetry_keys.write_key(self.credentials / telemetry_keys.MASTER_FILE, master)

    @property
    def bootstrap(self) -> str:
        """The address clients are given (the role files'): every member's in a cluster."""
        return self.member.cluster.bootstrap if self.member else self.listener.bootstrap

    def _limit(self, admin_password: str | None) -> None:
        """Set the quotas on the running broker, unless this cluster already has these ones
        (ConfigCommand is a JVM each: seconds on a first start, nothing after)."""
        wanted = {"cluster": broker_limits.cluster_of(self.dir / "data"),
                  "quotas": {str(user): quota.config() for user, quota in self.quotas.items()}}
        try:
            if json.loads(self.quotas_file.read_text()) == wanted:
                return
        except (FileNotFoundError, ValueError):
            pass
        with self.admin_tool(admin_password) as tool:
            broker_limits.set_quotas(tool, self.quotas)
        broker_auth.write_private(self.quotas_file, json.dumps(wanted, indent=2))

    def described_quotas(self, admin_password: str | None) -> dict[str | None, dict[str, float]]:
        """The users' quotas as the running broker has them (None: the default user's)."""
        with self.admin_tool(admin_password) as tool:
            return broker_limits.described_quotas(tool)

    @contextmanager
    def admin_tool(self, admin_password: str | None) -> Iterator[broker_limits.ConfigTool]:
        """Kafka's ConfigCommand as the admin, its settings in a private file while it runs."""
        client = self.dir / "admin-client.properties"
        broker_auth.write_private(client, broker_auth.client_properties(admin_password, self.ca))
        try:
            yield lambda *args: self._java("kafka.admin.ConfigCommand", "--bootstrap-server",
                                           self.listener.bootstrap, "--command-config", str(client), *args)
        finally:
            client.unlink(missing_ok=True)

    def _launch(self, secure: bool, timeout_s: float, listener: Listener | None = None) -> BrokerState:
        """Start the process with the written config (at `listener`, by default the broker's); wait
        until it accepts clients."""
        listener = listener or self.listener
        config = self.dir / "server.properties"
        log_start = self.log_file.stat().st_size if self.log_file.exists() else 0
        with open(self.log_file, "ab") as out:
            proc = subprocess.Popen(
                self._java("kafka.Kafka", str(config)), stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True, umask=0o077,
            )
        node, members = (self.member.node_id, len(self.member.cluster.members)) if self.member else (1, 1)
        state = BrokerState(proc.pid, listener.port, listener.controller_port, secure, listener.host,
                            listener.bootstrap, listener.tls, node, members)
        self.state_file.write_text(json.dumps(asdict(state)))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self.state_file.unlink(missing_ok=True)
                raise BrokerError(f"the broker exited with code {proc.returncode}; its log ends:\n"
                                  f"{tail(self.log_file)}")
            if accepts(listener.reach_host, listener.port) and ready(self.log_file, log_start):
                return state
            time.sleep(0.2)
        self.stop()
        wait = " (a member waits until a majority of the cluster's members run)" if self.member else ""
        raise BrokerError(f"the broker did not accept clients within {timeout_s:.0f}s{wait}; its log ends:\n"
                          f"{tail(self.log_file)}")

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop cleanly (SIGTERM, then SIGKILL after the timeout). False if it was not running."""
        state = self.state()
        if state is None:
            return False
        if state.members > 1:
            timeout_s = broker_cluster.shutdown_wait_s(self.dir / "cluster", state.node_id, timeout_s,
                                                       accepts)
        os.kill(state.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while alive(state.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(state.pid):
            log.warning("the broker did not stop within %.0fs; killing it", timeout_s)
            os.kill(state.pid, signal.SIGKILL)
        self.state_file.unlink(missing_ok=True)
        return True

    def _java(self, main: str, *args: str) -> list[str]:
        return [
            "java", HEAP, "-Xms128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            f"-Dlog4j.configuration=file:{self.dir / 'log4j.properties'}",
            "-cp", f"{self.libs}/*", main, *args,
        ]


def _require(program: str, message: str) -> None:
    if shutil.which(program) is None:
        raise BrokerError(message)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]
