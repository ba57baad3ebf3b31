"""Executors in threads of the test process, and readers of what they publish."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ports
from trainmedic.bus.consumer import EventConsumer
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.recovery.executor.command_loop import Executor
from trainmedic.recovery.executor.config import ExecutorConfig
from trainmedic.recovery.executor.core.admission import AdmissionPolicy
from trainmedic.recovery.executor.job_cgroup import hierarchies
from trainmedic.recovery.signing import SigningKey, TrustedKeys, generate
from trainmedic.schemas import Command

KEY = generate()  # the coordinator's key; executors trust its public half only
TRUSTED = TrustedKeys.of(KEY.private.public_key())
NODE_KEYS: dict[str, SigningKey] = {}  # each node's own key, which signs its acks
LAUNCHER = b"trainmedic.recovery.executor.forkserver"  # the zygote's and launchers' command line


def node_key(node: str) -> SigningKey:
    return NODE_KEYS.setdefault(node, generate())
# What these tests' ranks run: shell sleepers, the demo's training module, the tests' own ranks.
POLICY = AdmissionPolicy(allowed_executables=("sh", "sleep", "true"),
                         allowed_modules=("trainmedic.demo", "tests.integration.executor"))


class RunningExecutor:
    """An Executor serving in a thread until `stop()`."""

    def __init__(self, config: ExecutorConfig, kafka: KafkaSettings,
                 heard: threading.Event | None = None) -> None:
        self.executor = Executor(config, kafka, heard=heard)
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name=f"executor-{config.node}", daemon=True)
        self._thread.start()
        if not self.executor.ready.wait(30):
            raise TimeoutError("executor did not start within 30s")
        if self.error is not None:
            raise self.error

    def _serve(self) -> None:
        try:
            self.executor.run(self._stop)
        except BaseException as err:  # kept for the test to see
            self.error = err
            self.executor.ready.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        if self.error is not None:
            raise self.error


@pytest.fixture
def start_executor(kafka: KafkaSettings, tmp_path: Path) -> Iterator[Callable[..., RunningExecutor]]:
    """Start executors (node n1 by default, state under tmp_path); all are stopped at teardown."""
    running: list[RunningExecutor] = []

    def start(node: str = "n1", heard: threading.Event | None = None, **config: Any) -> RunningExecutor:
        settings = {"node": node, "state_dir": tmp_path / node, "trusted": TRUSTED,
                    "node_key": node_key(node), "stop_grace_s": 5.0, "admission": POLICY, **config}
        ex = RunningExecutor(ExecutorConfig(**settings), kafka, heard)
        running.append(ex)
        return ex

    yield start
    for ex in running:
        ex.stop()


@pytest.fixture
def send(kafka: KafkaSettings) -> Iterator[Callable[..., Command]]:
    """Publish a command to the commands topic, keyed by node, signed with KEY unless told otherwise."""
    producer = EventProducer(kafka)

    def publish(command: Command, key: SigningKey | None = KEY) -> Command:
        if key is not None:
            command = key.sign(command.model_copy(update={"deployment": kafka.topic_prefix}))
        producer.send(kafka.topics.commands, command, key=command.node)
        producer.flush()
        return command

    yield publish
    producer.close()


class Events:
    """Everything published on some topics since the test began, read as it arrives."""

    def __init__(self, kafka: KafkaSettings, topics: list[str]) -> None:
        self._consumer = EventConsumer(kafka, topics, f"test-{uuid.uuid4().hex[:12]}")
        self.seen: list[Any] = []

    def wait_for(self, predicate: Callable[[Any], bool], timeout_s: float = 60.0) -> Any:
        """The first event (seen before or arriving) that matches; raises after timeout_s."""
        deadline = time.monotonic() + timeout_s
        index = 0
        while True:
            while index < len(self.seen):
                if predicate(self.seen[index]):
                    return self.seen[index]
                index += 1
            if time.monotonic() > deadline:
                raise TimeoutError(f"no matching event; seen: {self.seen}")
            self.seen.extend(record.event for record in self._consumer.poll(0.2))

    def close(self) -> None:
        self._consumer.close()


@pytest.fixture
def events(kafka: KafkaSettings) -> Iterator[Events]:
    reader = Events(kafka, [kafka.topics.acks, kafka.topics.worker])
    yield reader
    reader.close()


@pytest.fixture(name="free_port")
def free_port_fixture() -> int:
    return ports.free_port()


def processes_of(job: str) -> list[int]:
    """Pids of live processes whose environment names `job`: what must be gone after a stop."""
    return processes_with(f"TRAINMEDIC_JOB={job}")


def processes_with(assignment: str) -> list[int]:
    """Pids of live (non-zombie) processes whose environment holds `NAME=value`."""
    found = []
    marker = assignment.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def job_processes(state_dir: Path) -> list[int]:
    """Pids of the live processes in the job cgroups of the executor of `state_dir` (its ranks, what
    they started, its jobs' launchers): trainmedic-NODE-DIGEST/job-*/ in the cgroup v2 tree."""
    digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:8]
    v2 = next(h for h in hierarchies(Path("/proc/self/mountinfo").read_text(),
                                     Path("/proc/self/cgroup").read_text()) if h.controller is None)
    found = []
    for procs in v2.base("").glob(f"trainmedic-*-{digest}/job-*/cgroup.procs"):
        with contextlib.suppress(OSError):
            found += [int(pid) for pid in procs.read_text().split() if _alive(int(pid))]
    return found


def ranks_of(state_dir: Path) -> list[int]:
    """Pids of the live ranks the executor of `state_dir` launched (and what they started), not its
    jobs' launchers."""
    return [pid for pid in job_processes(state_dir) if LAUNCHER not in _cmdline(pid)]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.fixture(autouse=True)
def no_orphans(kafka: KafkaSettings, tmp_path: Path) -> Iterator[None]:
    """After each test, SIGKILL any process started for it: services carry the test's topic prefix,
    ranks their executor's socket (executors' state folders are tmp_path/NODE)."""
    yield
    ranks = [pid for state in tmp_path.iterdir() if state.is_dir() for pid in ranks_of(state)]
    for pid in processes_with(f"TRAINMEDIC_TOPIC_PREFIX={kafka.topic_prefix}") + ranks:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
