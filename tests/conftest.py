"""Shared fixtures. `kafka` gives a real broker: never a mock, never a skip.

Where the broker comes from, in order: TRAINMEDIC_KAFKA_BOOTSTRAP if set; else the project's
own local broker (`trainmedic broker start`, secure) where Java is installed, started once for
the session and stopped after it if the session started it; else a testcontainers Kafka where
a Docker engine answers (plain: the broker ACL tests fail there, loudly).

Where the broker is the project's secure one (its credentials folder holds admin.json), the
session exports TRAINMEDIC_CREDENTIALS_DIR, so that the services tests start as subprocesses
(with a TRAINMEDIC_HOME of their own) find their role's credentials the normal way; tests set
up as the admin, and each test's prefix gets every role's ACLs (bus/acls.py) for its time.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from trainmedic.bus.settings import KafkaSettings, credentials_dir
from trainmedic.recovery.executor.job_cgroup import JobCgroups, hierarchies

ROOT = Path(__file__).resolve().parent.parent
# The suite's broker and state live in this checkout, not in the user's own home (~/.local/state/trainmedic):
# a test run neither uses nor disturbs the broker of the user's runs. Tests that need another home set it.
os.environ.setdefault("TRAINMEDIC_HOME", str(ROOT / ".trainmedic"))


def _executor_trees() -> set[str]:
    """The names of the executors' job cgroup trees beside this process's cgroup (job_cgroup.py)."""
    if os.geteuid() != 0:
        return set()
    found = hierarchies(Path("/proc/self/mountinfo").read_text(), Path("/proc/self/cgroup").read_text())
    return {path.name for h in found if h.controller is None and h.base("").is_dir()
            for path in h.base("").glob("trainmedic-*")}


def _report_folders() -> set[Path]:
    """The executors' folders of their jobs' report sockets (report_sockets.socket_folder)."""
    parent = Path(tempfile.gettempdir()) / f"trainmedic-{os.getuid()}"
    return set(parent.iterdir()) if parent.is_dir() else set()


@pytest.fixture(scope="session", autouse=True)
def _no_job_cgroups_left() -> Iterator[None]:
    """An executor a test kills (the chaos tests) leaves its job cgroups and its jobs' report sockets
    to a next executor that never comes: the ones this session made are emptied and removed at its
    end."""
    before, folders = _executor_trees(), _report_folders()
    yield
    found = hierarchies(Path("/proc/self/mountinfo").read_text(), Path("/proc/self/cgroup").read_text())
    for name in _executor_trees() - before:
        tree = JobCgroups(found, name.removeprefix("trainmedic-"))
        for job in tree.jobs():
            tree.kill(job)
        tree.close()
    for folder in _report_folders() - folders:
        shutil.rmtree(folder, ignore_errors=True)


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=2).ping()
    except Exception:  # any failure means: no engine to use
        return False
    return True


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """The bootstrap address of a real, running Kafka broker."""
    if os.environ.get("TRAINMEDIC_KAFKA_BOOTSTRAP"):
        with _credentials_exported():
            yield os.environ["TRAINMEDIC_KAFKA_BOOTSTRAP"]
        return
    if shutil.which("java") is None and _docker_answers():
        from testcontainers.community.kafka import KafkaContainer

        # testcontainers' KafkaContainer drives Confluent's image; 7.9 ships Apache Kafka 3.9.
        with KafkaContainer("confluentinc/cp-kafka:7.9.0").with_kraft() as container:
            yield container.get_bootstrap_server()
        return
    from trainmedic.bus.settings import home
    from trainmedic.local.broker import LocalBroker, broker_port

    broker = LocalBroker(home(), port=broker_port())
    state, started = broker.start()
    try:
        with _credentials_exported():
            yield state.bootstrap
    finally:
        if started:
            broker.stop()


@contextmanager
def _credentials_exported() -> Iterator[None]:
    """TRAINMEDIC_CREDENTIALS_DIR set to the local broker's credentials folder while it has one."""
    folder = credentials_dir()
    if not (folder / "admin.json").exists():
        yield
        return
    before = os.environ.get("TRAINMEDIC_CREDENTIALS_DIR")
    os.environ["TRAINMEDIC_CREDENTIALS_DIR"] = str(folder)
    try:
        yield
    finally:
        if before is None:
            del os.environ["TRAINMEDIC_CREDENTIALS_DIR"]
        else:
            os.environ["TRAINMEDIC_CREDENTIALS_DIR"] = before


@pytest.fixture
def deployment(kafka_bootstrap: str) -> Iterator[Callable[..., KafkaSettings]]:
    """`deployment(prefix=None, partitions=2)`: the admin's settings for a prefix of its own (made up
    when not given), its topics created and every role's ACLs granted for it (one request). After
    the test every topic under the prefix is deleted (services' own topics too, when their app id
    starts with the prefix) and the ACLs revoked, so that a long-lived broker does not pile them up."""
    from trainmedic.bus.admin import create_topics, grant_roles, remove_prefix

    made: list[KafkaSettings] = []

    def make(prefix: str | None = None, partitions: int | None = 2) -> KafkaSettings:
        settings = KafkaSettings.from_env(role="admin", bootstrap=kafka_bootstrap,
                                          topic_prefix=prefix or f"t{uuid.uuid4().hex[:10]}.")
        create_topics(settings, partitions=partitions)
        grant_roles(settings, settings.topic_prefix)
        made.append(settings)
        return settings

    yield make
    for settings in made:
        remove_prefix(settings, settings.topic_prefix)


@pytest.fixture
def kafka(deployment: Callable[..., KafkaSettings]) -> KafkaSettings:
    """The admin's settings for a real broker with a topic prefix of this test's own (see `deployment`)."""
    return deployment()


@pytest.fixture
def group_id() -> str:
    """A consumer group of this test's own."""
    return f"test-{uuid.uuid4().hex[:12]}"


AM_CONFIG = """\
route:
  receiver: blackhole
  group_wait: 1s
receivers:
  - name: blackhole
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    """The base URL of a real Alertmanager (Debian's prometheus-alertmanager) on a loopback port."""
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.fail("prometheus-alertmanager is not installed: run `make alertmanager` "
                    "(apt-get install prometheus-alertmanager); these tests never skip")
    (tmp_path / "am.yml").write_text(AM_CONFIG)
    port = _free_port()
    log = open(tmp_path / "alertmanager.log", "w")  # noqa: SIM115 - closed after the process
    proc = subprocess.Popen([binary, f"--config.file={tmp_path / 'am.yml'}",
                             f"--storage.path={tmp_path / 'am'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--cluster.listen-address="],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, f"alertmanager exited: {(tmp_path / 'alertmanager.log').read_text()}"
            assert time.monotonic() < deadline, "alertmanager did not get ready in 30s"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
