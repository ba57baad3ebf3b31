"""What a job reports concerns only that job (issue 32, point 2), on the real stack.

The project's secure broker, the real detector (the consumer engine, in this process), a real
coordinator, three real executors (n1, n2, n3) that check its command signatures, and a job of
`sleep` ranks on n1 and n2, n3 idle. Host agents' telemetry (heartbeats, GPU samples) is written with the
`agent` role's credentials; the job's own reports (its ranks are `sleep`s, which report nothing)
and the three forgeries found with the rank credentials are written with the `executor` role's,
the one writer of `telemetry.worker`:

(i) forged `worker_error`s naming invented jobs on idle n3 (with and without a forged
    `worker_start`): no node is isolated;
(ii) a `worker_step` of the real job at generation 10**15, then a real crash (a rank killed with
    SIGKILL, reported by its executor): the job still gets its incident and its restart;
(iii) forged `worker_error`s (each after a forged `worker_start`) of two real jobs whose specs
    name n3 (one runs there, one waits for it; issue 45): n3 is not isolated; it becomes suspect, its
    executor runs its health check (the built-in probe: no GPU here, so it passes), and the passed
    check ends the suspicion;
(iv) a real Xid 79 on n3 isolates it; forged `worker_start`s and steps naming n3 do not resolve
    its `gpu_lost`, and n3 stays isolated.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers.waiting import wait_until
from tests.integration.executor.conftest import RunningExecutor
from tests.integration.security.attack_stack import rank_pids
from tests.integration.test_coordinator import Keys, leading
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.reader import NOW, TopicReader
from trainmedic.bus.settings import KafkaSettings, credentials_dir
from trainmedic.recovery import keyring
from trainmedic.recovery.coordinator.core import CoordinatorConfig, JobState, NodeConfig
from trainmedic.recovery.coordinator.core.lifecycle import new_work_refused
from trainmedic.recovery.coordinator.kafka_adapter import CoordinatorService
from trainmedic.recovery.executor.config import ExecutorConfig
from trainmedic.recovery.executor.core.admission import AdmissionPolicy
from trainmedic.schemas import (
    GpuSample,
    Incident,
    JobSpec,
    NodeHeartbeat,
    RecoveryKind,
    RecoveryPlanned,
    WorkerFailed,
    WorkerStarted,
    WorkerStepped,
)
from trainmedic.streams.core import Detector
from trainmedic.streams.engines.consumer import DetectorService, ServiceConfig
from trainmedic.streams.live import LiveDetector
from trainmedic.streams.pipeline import Pipeline

pytestmark = pytest.mark.kafka

NODES = ("n1", "n2", "n3")
CONFIG = CoordinatorConfig(tick_s=0.2, ack_timeout_s=5.0, max_retries=1, default_address="127.0.0.1",
                           nodes=tuple(NodeConfig(id=n, switch="leaf-1") for n in NODES))
CUDA = "RuntimeError: CUDA error: an illegal memory access was encountered"


@dataclass
class Stack:
    admin: KafkaSettings
    coordinator: CoordinatorService
    lock: threading.Lock
    root: Path
    keys: Keys
    silent_gpus: set[tuple[str, int]] = field(default_factory=set)  # GPUs that fell off the bus

    def as_role(self, role: str) -> KafkaSettings:
        return KafkaSettings.from_env(role=role, bootstrap=self.admin.bootstrap,
                                      topic_prefix=self.admin.topic_prefix)

    def report(self, *events) -> None:
        """Write worker reports as an executor's principal may."""
        with EventProducer(self.as_role("executor")) as producer:
            for event in events:
                producer.send(self.admin.topics.worker, event, key=event.job)

    def submit(self, spec: JobSpec) -> None:
        with EventProducer(self.as_role("operator")) as producer:
            producer.send(self.admin.topics.jobs, self.keys.job(spec), key=spec.id)

    def held(self, node: str) -> str | None:
        """Why the coordinator gives `node` no new work (None: it may take some)."""
        with self.lock:
            return new_work_refused(self.coordinator.state, node)

    def suspicions(self, node: str) -> list[Incident]:
        """The coordinator's `node_suspect` incidents for `node`, as it holds them now."""
        with self.lock:
            return [i for i in self.coordinator.state.incidents.values()
                    if i.category == "node_suspect" and i.node == node]

    def incidents(self) -> list[Incident]:
        with TopicReader(self.admin, [self.admin.topics.incidents], end=NOW, validate=True) as reader:
            return [r.event for batch in reader.batches() for r in batch if isinstance(r.event, Incident)]

    def isolated(self) -> list[str]:
        with self.lock:
            return sorted(n for n, node in self.coordinator.state.nodes.items() if not node.healthy)

    def plans(self) -> list[RecoveryPlanned]:
        with TopicReader(self.admin, [self.admin.topics.recovery], end=NOW, validate=True) as reader:
            return [r.event for batch in reader.batches() for r in batch
                    if isinstance(r.event, RecoveryPlanned)]


def worker(kind, node: str, rank: int, job: str = "llm", generation: int = 0, world_size: int = 2, **fields):
    return kind(ts=time.time(), node=node, job=job, rank=rank, world_size=world_size, generation=generation,
                **fields)


def _agents(stack: Stack, stop: threading.Event) -> None:
    """Every node's host agent and GPU producer, once a second; the job's ranks step (as their
    executors would report it) at generation 0."""
    agent = EventProducer(stack.as_role("agent"))
    executor = EventProducer(stack.as_role("executor"))
    topics, step = stack.admin.topics, 0
    try:
        while not stop.is_set():
            now = time.time()
            for node in NODES:
                agent.send(topics.node, NodeHeartbeat(ts=now, node=node, interval=1.0), key=node)
                for gpu in (0, 1):
                    if (node, gpu) not in stack.silent_gpus:
                        agent.send(topics.gpu, GpuSample(ts=now, node=node, gpu=gpu, ecc_dbe=0,
                                                         nvlink_errors=0), key=node)
            for rank, node in enumerate(("n1", "n2")):
                executor.send(topics.worker, worker(WorkerStepped, node, rank, step=step, step_time=1.0),
                              key="llm")
            agent.flush()
            executor.flush()
            step += 1
            stop.wait(1.0)
    finally:
        agent.close()
        executor.close()


def _loop(step: Callable[[], None], stop: threading.Event) -> None:
    while not stop.is_set():
        step()
        time.sleep(0.05)


@pytest.fixture
def stack(deployment, tmp_path: Path) -> Iterator[Stack]:
    assert (credentials_dir() / "admin.json").exists(), "needs the project's secure broker"
    admin = deployment(f"t{uuid.uuid4().hex[:10]}.")
    keys = Keys(tmp_path / "keys", nodes=NODES, deployment=admin.topic_prefix)
    as_role = lambda role: KafkaSettings.from_env(role=role, bootstrap=admin.bootstrap,  # noqa: E731
                                                  topic_prefix=admin.topic_prefix)
    executors = [RunningExecutor(ExecutorConfig(
        node=n, state_dir=tmp_path / n, trusted=keyring.load_trusted(keys.folder), node_key=keys.nodes[n].key,
        stop_grace_s=2.0, admission=AdmissionPolicy(allowed_executables=("sleep",)), warm_start=False),
        as_role("executor")) for n in NODES]
    spec = JobSpec(id="llm", nodes=("n1", "n2"), throughput={2: 2.0e15}, command=("sleep", "600"))
    with EventProducer(as_role("operator")) as producer:
        producer.send(admin.topics.jobs, keys.job(spec), key=spec.id)
    # trust=None: the coordinator folds what it reads unverified (as `--insecure`): the signatures of
    # jobs and acks are the attack suite's; this test is about what the detector makes of reports
    coordinator = leading(as_role("coordinator"), CONFIG, sign=keys.coordinator.sign)
    coordinator.start()
    detector_role = as_role("detector")
    detector = DetectorService(detector_role, Pipeline(detector_role.topics, LiveDetector(Detector())),
                               ServiceConfig(app_id=f"{admin.topic_prefix}detector", start="earliest"))
    lock, stop = threading.Lock(), threading.Event()
    made = Stack(admin, coordinator, lock, tmp_path, keys)

    def coordinate() -> None:
        with lock:
            coordinator.step(0.1)

    threads = [threading.Thread(target=_loop, args=(coordinate, stop), daemon=True),
               threading.Thread(target=detector.run, args=(stop.is_set,), daemon=True),
               threading.Thread(target=_agents, args=(made, stop), daemon=True)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: coordinator.state.jobs["llm"].state is JobState.RUNNING
                   if "llm" in coordinator.state.jobs else False, 60.0, "the job runs")
        wait_until(lambda: rank_pids(tmp_path, "n1") and rank_pids(tmp_path, "n2"), 30.0, "its ranks")
        made.report(*(worker(WorkerStarted, n, r) for r, n in enumerate(("n1", "n2"))))
        yield made
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
        coordinator.close()
        for ex in executors:
            ex.stop()


def test_forged_worker_reports_neither_isolate_nor_blind_nor_return_a_node(stack: Stack) -> None:
    # (i) invented jobs failing on idle n3: two bare errors, then two with a start of their own
    stack.report(worker(WorkerFailed, "n3", 0, job="invented-1", error=CUDA),
                 worker(WorkerFailed, "n3", 0, job="invented-2", error=CUDA),
                 worker(WorkerStarted, "n3", 0, job="invented-3"),
                 worker(WorkerFailed, "n3", 0, job="invented-3", error=CUDA),
                 worker(WorkerStarted, "n3", 0, job="invented-4"),
                 worker(WorkerFailed, "n3", 0, job="invented-4", error="ValueError: forged"))
    wait_until(lambda: len([i for i in stack.incidents() if i.job and i.job.startswith("invented")]) >= 4,
               30.0, "the invented jobs' incidents")
    time.sleep(4.0)  # the coordinator's group window (1.5 s) and a tick or two
    assert stack.isolated() == []

    # (ii) one step far ahead, then a real crash of generation 0
    stack.report(worker(WorkerStepped, "n1", 0, generation=10**15, step=10**6, step_time=1.0))
    time.sleep(2.0)
    for pid in rank_pids(stack.root, "n1"):
        os.kill(pid, signal.SIGKILL)
    crash = wait_until(lambda: [i for i in stack.incidents() if i.job == "llm" and i.status == "open"],
                       30.0, "the crash's incident")
    assert [(i.category, i.severity) for i in crash] == [("process_exit", "SEV2")], crash
    wait_until(lambda: [p for p in stack.plans() if p.kind is RecoveryKind.RESTART and p.generation == 1],
               30.0, "the job's restart")
    assert stack.isolated() == []

    # (iii) two real jobs whose specs name n3, one running there, one waiting for it; a forged error of each
    for spec in (JobSpec(id="on-n3", nodes=("n3",), throughput={1: 1.0e15}, command=("sleep", "600")),
                 JobSpec(id="for-n3", nodes=("n3",), throughput={1: 1.0e15}, command=("sleep", "600"))):
        stack.submit(spec)
    wait_until(lambda: rank_pids(stack.root, "n3"), 30.0, "job on-n3 runs on n3")
    stack.report(*(event for job in ("on-n3", "for-n3")
                   for event in (worker(WorkerStarted, "n3", 0, job=job, world_size=1),
                                 worker(WorkerFailed, "n3", 0, job=job, world_size=1, error=CUDA))))
    wait_until(lambda: stack.suspicions("n3"), 30.0, "n3 suspect")  # raised open; its check is out
    assert stack.isolated() == []
    wait_until(lambda: all(i.status == "resolved" for i in stack.suspicions("n3")), 30.0, "n3's check passed")
    [passed] = stack.suspicions("n3")
    assert "passed on n3: no GPU seen" in passed.evidence[-1], passed.evidence  # the node's own answer
    time.sleep(3.0)  # the group window and a tick or two: nothing isolates n3 after its check
    assert stack.isolated() == [] and stack.held("n3") is None

    # (iv) a real Xid 79 on n3 isolates it; forged starts and steps naming n3 do not bring it back
    stack.silent_gpus.add(("n3", 0))
    with EventProducer(stack.as_role("agent")) as agent:
        agent.send(stack.admin.topics.gpu, GpuSample(ts=time.time(), node="n3", gpu=0, xids=(79,)), key="n3")
    wait_until(lambda: stack.isolated() == ["n3"], 30.0, "n3 isolated for its gpu_lost")
    stack.report(worker(WorkerStarted, "n3", 0, job="invented-5"),
                 worker(WorkerStarted, "n3", 1, generation=2),
                 worker(WorkerStepped, "n3", 1, generation=2, step=0, step_time=1.0),
                 worker(WorkerStepped, "n3", 0, job="invented-5", step=0, step_time=1.0))
    time.sleep(6.0)
    lost = [i for i in stack.incidents() if i.category == "gpu_lost"]
    assert [(i.node, i.status) for i in lost] == [("n3", "open")], lost
    assert stack.isolated() == ["n3"]
