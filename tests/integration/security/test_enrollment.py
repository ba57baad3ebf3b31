"""Enrollment by join token (issue 45) on a TLS broker of this module's own (the session's broker runs
on loopback without TLS, and a token pins the broker's CA): `trainmedic nodes enroll` publishes a
signed enrollment, `trainmedic broker registrar` (a subprocess, as on the broker's host) lets the node
join once with its token, and the node's credentials then write as that node only; a used, expired,
misdirected or mis-pinned token is refused; a node enrolled and joined again gets a new password, the
old one refused; `nodes remove` refuses the node's writes within 5 s; control-plane hosts join by a token
of `broker invite` and learn keys trusted later by `keys sync`. Without a broker: `--join` reads the
token from a file or stdin, and a node registers the GPUs it has."""

from __future__ import annotations

import argparse
import io
import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers.ports import free_pairs, free_port
from tests.integration.security.test_broker_acls import REFUSED
from trainmedic.bus import clients
from trainmedic.bus.admin import create_topics
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.reader import NOW, TopicReader
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import ConfigError
from trainmedic.node_join import UNCOUNTED_GPUS, gpu_count, join
from trainmedic.ops import node_enroll
from trainmedic.recovery import keyring
from trainmedic.recovery.join_token import NODE_FILES, make_token
from trainmedic.registrar_client import JoinRefused, token_argument
from trainmedic.schemas import NodeHeartbeat, NodeRegistered, decode
from trainmedic.schemas.topics import adapter

pytestmark = pytest.mark.kafka

PREFIX = "enroll."


class Deployment:
    """The broker host's home, the operator's keys and settings, the registrar's address and its log."""

    def __init__(self, home: Path, bootstrap: str, registrar_port: int) -> None:
        self.home = home
        self.bootstrap = bootstrap
        self.registrar_port = registrar_port
        self.env = {**os.environ, "TRAINMEDIC_HOME": str(home), "TRAINMEDIC_TOPIC_PREFIX": PREFIX}
        for name in ("TRAINMEDIC_CREDENTIALS_DIR", "TRAINMEDIC_KAFKA_BOOTSTRAP"):
            self.env.pop(name, None)  # the session broker's: this one has its own
        self.operator_keys = home / "operator-keys"
        self.lines: list[str] = []

    @property
    def settings(self) -> KafkaSettings:
        """The operator's (its role file is written when the broker starts)."""
        return self.of("operator")

    def of(self, role: str, folder: Path | None = None) -> KafkaSettings:
        folder = folder or self.home / "credentials"
        env = {"TRAINMEDIC_CREDENTIALS_DIR": str(folder)}
        return KafkaSettings.from_env(env, role=role, topic_prefix=PREFIX)

    def enroll(self, node: str, ttl_s: float = 600.0, port: int | None = None) -> str:
        key = keyring.load_signing(self.operator_keys, keyring.OPERATOR)
        token, _ = node_enroll.enroll(self.settings, key, self.operator_keys, node, ttl_s,
                                      port or self.registrar_port, "test", time.time())
        return token

    def join(self, token: str, where: Path, node: str | None = None):
        return join(token, self.bootstrap, folder=where / "credentials", keys_dir=where / "keys",
                    address="10.0.0.5", gpus=2, prefix=PREFIX, now=time.time(), node=node, timeout_s=15.0)


def cli(env: dict, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainmedic.cli", *args], capture_output=True, text=True,
                          env=env, timeout=240)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("broker-host")
    (port,) = free_pairs(1, 19600, 19699)
    bed = Deployment(home, f"127.0.0.1:{port}", free_port())
    started = cli(bed.env, "broker", "start", "--listen", bed.bootstrap, "--tls")
    assert started.returncode == 0, started.stderr
    registrar = None
    try:
        create_topics(bed.of("admin"), partitions=1)
        now = time.time()
        keyring.generate_key(bed.operator_keys, now, keyring.OPERATOR)
        coordinator = home / "coordinator-keys"
        made = keyring.generate_key(coordinator, now, keyring.COORDINATOR)
        keyring.trust_key(bed.operator_keys, coordinator / f"{made}.pub", keyring.COORDINATOR, now)
        operator = keyring.load_signing(bed.operator_keys, keyring.OPERATOR).key_id
        keyring.trust_key(home / "keys", bed.operator_keys / f"{operator}.pub", keyring.OPERATOR, now)
        bed.coordinator = made
        registrar = subprocess.Popen(
            [sys.executable, "-m", "trainmedic.cli", "broker", "registrar", "--listen",
             f"127.0.0.1:{bed.registrar_port}"], env=bed.env, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=lambda: bed.lines.extend(registrar.stderr), daemon=True).start()
        deadline = time.monotonic() + 120
        while not any("registrar ready on https://" in line for line in bed.lines):
            assert registrar.poll() is None and time.monotonic() < deadline, "".join(bed.lines)
            time.sleep(0.2)
        yield bed
    finally:
        if registrar is not None:
            registrar.terminate()
            assert registrar.wait(30) == 0, "".join(bed.lines)
        stopped = cli(bed.env, "broker", "stop")
        assert stopped.returncode == 0, stopped.stderr


def test_an_enrolled_node_joins_once_and_writes_as_itself(deployment: Deployment, tmp_path: Path) -> None:
    node = f"n-{uuid.uuid4().hex[:6]}"
    env = {**deployment.env, "TRAINMEDIC_CREDENTIALS_DIR": str(deployment.home / "credentials")}
    enrolled = cli(env, "nodes", "enroll", node, "--keys-dir", str(deployment.operator_keys),
                   "--registrar-port", str(deployment.registrar_port), "--expires", "10m")
    assert enrolled.returncode == 0, enrolled.stderr
    *said, token = enrolled.stdout.strip().splitlines()
    assert any(f"trainmedic node --join @TOKEN_FILE --bootstrap {deployment.bootstrap}" in line
               for line in said)
    assert any("SECRET until it is used or expires" in line for line in said)

    joined = deployment.join(token, tmp_path)
    folder = tmp_path / "credentials"
    assert (joined.node, joined.folder, joined.coordinators) == (node, folder, (deployment.coordinator,))
    assert sorted(p.name for p in folder.iterdir()) == sorted(NODE_FILES)
    assert folder.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in folder.iterdir())
    assert keyring.load_roles(tmp_path / "keys")[keyring.COORDINATOR].keys.keys() == {deployment.coordinator}
    own = keyring.load_signing(tmp_path / "keys", keyring.node_role(node)).key_id

    agent = deployment.of("agent", folder)
    assert agent.extra["sasl.username"] == f"node-{node}" and agent.bootstrap == deployment.bootstrap
    with EventProducer(agent) as producer:  # raises on a refused delivery
        producer.send(agent.topics.node, NodeHeartbeat(ts=time.time(), node=node, interval=1.0), key=node)

    with TopicReader(deployment.of("admin"), [agent.topics.acks], end=NOW) as reader:
        acks = [decode(raw.value, adapter("acks")) for batch in reader.batches(give_up_s=30) for raw in batch]
    registered = [a for a in acks if isinstance(a, NodeRegistered) and a.node == node]
    got = [(r.key.key_id, r.address, r.gpus, r.deployment) for r in registered]
    assert got == [(own, "10.0.0.5", 2, PREFIX)]

    with pytest.raises(JoinRefused, match="used already"):
        deployment.join(token, tmp_path / "again")
    with pytest.raises(ConfigError, match="already joined"):
        deployment.join(token, tmp_path)


def test_expired_misdirected_and_mispinned_tokens_are_refused(deployment: Deployment, tmp_path: Path) -> None:
    node = f"x-{uuid.uuid4().hex[:6]}"
    expiring = deployment.enroll(node, ttl_s=1.0)
    time.sleep(1.5)
    with pytest.raises(JoinRefused, match="expired"):
        deployment.join(expiring, tmp_path / "expired")
    token = deployment.enroll(node)
    with pytest.raises(ConfigError, match="not --node"):
        deployment.join(token, tmp_path / "other", node="someone-else")
    ca = (deployment.home / "credentials" / "ca.pem").read_bytes()
    unenrolled, _ = make_token(f"ghost-{uuid.uuid4().hex[:4]}", ca, deployment.registrar_port)
    with pytest.raises(JoinRefused, match="is not enrolled here"):
        deployment.join(unenrolled, tmp_path / "ghost")
    mispinned, _ = make_token(node, ca.replace(b"\n", b"\r\n"), deployment.registrar_port)
    with pytest.raises(JoinRefused, match="man in the middle"):
        deployment.join(mispinned, tmp_path / "mitm")
    assert not (tmp_path / "mitm" / "credentials").exists()
    assert any("join refused from 127.0.0.1 (expired)" in line for line in deployment.lines)


def test_a_node_joining_again_gets_a_new_password_and_the_old_is_refused(deployment: Deployment,
                                                                        tmp_path: Path) -> None:
    node = f"a-{uuid.uuid4().hex[:6]}"
    deployment.join(deployment.enroll(node), tmp_path / "first")
    deployment.join(deployment.enroll(node), tmp_path / "second")  # enrolled again, never removed
    old, new = (deployment.of("agent", tmp_path / where / "credentials") for where in ("first", "second"))
    assert old.secrets["sasl.password"] != new.secrets["sasl.password"]
    answers: list = []
    for settings in (new, old):
        producer = clients.producer(settings, {"message.timeout.ms": 4000})
        producer.produce(f"{PREFIX}telemetry.node", b"{}", partition=0,
                         on_delivery=lambda err, _: answers.append(err))
        producer.flush(10)
    assert answers[0] is None and answers[1] is not None


def test_a_removed_nodes_writes_are_refused_within_5s(deployment: Deployment, tmp_path: Path) -> None:
    node = f"r-{uuid.uuid4().hex[:6]}"
    deployment.join(deployment.enroll(node), tmp_path)
    agent = deployment.of("agent", tmp_path / "credentials")
    producer = clients.producer(agent, {"message.timeout.ms": 10_000})
    answers: list = []

    def send() -> None:
        producer.produce(f"{PREFIX}telemetry.node", b"{}", partition=0,
                         on_delivery=lambda err, _: answers.append(err))
        producer.flush(15)

    send()
    assert answers == [None]
    key = keyring.load_signing(deployment.operator_keys, keyring.OPERATOR)
    node_enroll.remove(deployment.settings, key, node, "retired", "test", time.time())
    removed = time.monotonic()
    while answers[-1] is None and time.monotonic() - removed < 10:
        send()
        time.sleep(0.1)
    took = time.monotonic() - removed
    assert answers[-1] is not None and answers[-1].name() == REFUSED
    assert took < 5, f"refused after {took:.1f}s"
    assert any(f"node {node} removed by the operator" in line for line in deployment.lines)


def host_join(deployment: Deployment, host: Path, *roles: str) -> subprocess.CompletedProcess[str]:
    """`broker invite ROLES` on the broker's host, then `join @TOKEN_FILE` on `host` (a home of its own)."""
    invited = cli(deployment.env, "broker", "invite", *roles, "--registrar-port",
                  str(deployment.registrar_port))
    assert invited.returncode == 0, invited.stderr
    assert f"trainmedic join @TOKEN_FILE --bootstrap {deployment.bootstrap}" in invited.stderr
    host.mkdir()
    (host / "token").write_text(invited.stdout.strip().splitlines()[-1] + "\n")
    return cli({**deployment.env, "TRAINMEDIC_HOME": str(host)}, "join", f"@{host / 'token'}", "--bootstrap",
               deployment.bootstrap)


def test_control_plane_hosts_join_by_token_and_sync_the_keys_trusted_later(deployment: Deployment,
                                                                          tmp_path: Path) -> None:
    broker_keys, control, operator = deployment.home / "keys", tmp_path / "control", tmp_path / "operator"
    joined = host_join(deployment, control, "detector", "coordinator")
    assert joined.returncode == 0, joined.stderr
    folder = control / "credentials"
    names = ("ca.pem", "coordinator.json", "detector.json", "telemetry-master.key")
    assert sorted(p.name for p in folder.iterdir()) == sorted(names)
    assert all((folder / n).read_bytes() == (deployment.home / "credentials" / n).read_bytes() for n in names)
    assert all((folder / n).stat().st_mode & 0o777 == 0o600 for n in names)
    coordinator = keyring.load_signing(control / "keys", keyring.COORDINATOR).key_id
    assert coordinator in keyring.load_roles(broker_keys)[keyring.COORDINATOR].keys
    first_operator = keyring.load_signing(deployment.operator_keys, keyring.OPERATOR).key_id
    assert set(keyring.load_roles(control / "keys")[keyring.OPERATOR].keys) == {first_operator}
    with EventProducer(deployment.of("coordinator", folder)) as producer:  # its credentials write
        producer.send(f"{PREFIX}commands", b"{}", key="n0")

    again = cli({**deployment.env, "TRAINMEDIC_HOME": str(tmp_path / "thief")}, "join",
                f"@{control / 'token'}", "--bootstrap", deployment.bootstrap)
    assert again.returncode == 1 and "used already" in again.stderr, again.stderr

    joined = host_join(deployment, operator, "operator")
    assert joined.returncode == 0, joined.stderr
    assert sorted(p.name for p in (operator / "credentials").iterdir()) == ["ca.pem", "operator.json"]
    second_operator = keyring.load_signing(operator / "keys", keyring.OPERATOR).key_id
    assert second_operator in keyring.load_roles(broker_keys)[keyring.OPERATOR].keys
    trusted = keyring.load_roles(operator / "keys")
    assert coordinator in trusted[keyring.COORDINATOR].keys
    assert set(trusted[keyring.OPERATOR].keys) == {second_operator}  # its own: no coordinator, no others'

    control_env = {**deployment.env, "TRAINMEDIC_HOME": str(control)}
    sync = ("keys", "sync", "--bootstrap", deployment.bootstrap, "--registrar-port",
            str(deployment.registrar_port))
    synced = cli(control_env, *sync)
    assert synced.returncode == 0, synced.stderr
    assert f"1 trusted here anew ({second_operator})" in synced.stdout
    assert set(keyring.load_roles(control / "keys")[keyring.OPERATOR].keys) == {first_operator,
                                                                                  second_operator}

    keyring.revoke_key(broker_keys, second_operator, time.time())
    synced = cli(control_env, *sync)
    assert synced.returncode == 0 and f"1 revoked ({second_operator})" in synced.stdout, synced.stderr
    assert {k.key_id: k.revoked is not None for k in keyring.list_keys(control / "keys")}[second_operator]


def test_a_nodes_token_does_not_join_a_host_nor_a_hosts_a_node(deployment: Deployment,
                                                               tmp_path: Path) -> None:
    node_token = deployment.enroll(f"t-{uuid.uuid4().hex[:6]}")
    (tmp_path / "token").write_text(node_token)
    refused = cli({**deployment.env, "TRAINMEDIC_HOME": str(tmp_path / "host")}, "join",
                  f"@{tmp_path / 'token'}", "--bootstrap", deployment.bootstrap)
    assert refused.returncode == 2 and "`trainmedic node --join` with it" in refused.stderr, refused.stderr
    invited = cli(deployment.env, "broker", "invite", "detector", "--registrar-port",
                  str(deployment.registrar_port))
    with pytest.raises(ConfigError, match="not a node: run `trainmedic join` with it"):
        deployment.join(invited.stdout.strip().splitlines()[-1], tmp_path / "node")


def test_the_token_comes_from_a_file_or_stdin_and_one_in_argv_is_warned_of(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "token").write_text("tmjoin1.from-file\n")
    with caplog.at_level(logging.WARNING, "trainmedic.join"):
        assert token_argument(f"@{tmp_path / 'token'}") == "tmjoin1.from-file"
        assert token_argument("-", io.StringIO("tmjoin1.from-stdin\nmore\n")) == "tmjoin1.from-stdin"
        assert caplog.records == []
        assert token_argument("tmjoin1.in-argv") == "tmjoin1.in-argv"
    assert "visible in the process list" in caplog.text and "pass @FILE" in caplog.text
    with pytest.raises(ConfigError, match="cannot read the token file"):
        token_argument(f"@{tmp_path / 'none'}")


class Nvml:
    """Stands in for pynvml: `count` GPUs, or none when no driver answers (None)."""

    class NVMLError(Exception):
        pass

    def __init__(self, count: int | None) -> None:
        self.count = count
        self.shut = False

    def nvmlInit(self) -> None:  # noqa: N802 (pynvml's names)
        if self.count is None:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return self.count

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shut = True


def test_a_node_registers_the_gpus_it_has(caplog: pytest.LogCaptureFixture) -> None:
    synthetic = argparse.Namespace(TRAINMEDIC_GPU_SOURCE="synthetic", TRAINMEDIC_GPU_GPUS_PER_NODE=3)
    assert gpu_count(synthetic, {}) == 3
    assert gpu_count(argparse.Namespace(), {"TRAINMEDIC_GPU_SOURCE": "synthetic"}) == 8  # its default
    nvml = Nvml(4)
    assert gpu_count(argparse.Namespace(), {}, nvml) == 4 and nvml.shut
    with caplog.at_level(logging.WARNING, "trainmedic.join"):
        assert gpu_count(argparse.Namespace(), {}, Nvml(None)) == UNCOUNTED_GPUS
    assert "NVML cannot count this node's GPUs (Driver Not Loaded)" in caplog.text
