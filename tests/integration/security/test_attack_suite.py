"""The attack suite: every forgery of issue 14 against one secure stack, each refused.

One deployment on the project's secure broker (SASL/SCRAM, the authorizer, one principal per
role): a coordinator that verifies what it folds, three real executors (n1, n2, n3) that hold
only the coordinator's public keys and their own node key, and a job (`sleep` ranks) running on
n1 and n2, n3 idle. Each attack uses the credentials and keys its attacker would hold (a rank's,
a node's, the detector's, an operator's Kafka principal without the operator key, a stolen old
command) and must be refused where docs/security.md says: by the broker's ACLs (the denial in
the broker's authorizer log), or by the receiving service (a dead letter or a `refused` ack with
the reason, counted in a metric). After every attack the stack must be as before: no node
isolated or moved out of the pool, the job still at generation 0 on n1 and n2 with the same
rank processes, no command signed for anything the attacker asked, and the attacker's program
never ran (it would create a marker file). `ATTACKS` is the catalogue docs/security.md counts.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from tests.helpers.waiting import wait_until
from tests.integration.executor.conftest import RunningExecutor, ranks_of
from tests.integration.test_coordinator import Keys, leading
from trainmedic.bus import clients
from trainmedic.bus.admin import create_topics, delete_topics, grant_roles, list_topics, revoke_roles
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.reader import NOW, TopicReader
from trainmedic.bus.settings import KafkaSettings, credentials_dir, home
from trainmedic.recovery import keyring
from trainmedic.recovery.coordinator.core import CoordinatorConfig, JobState, NodeConfig
from trainmedic.recovery.coordinator.core.commands import escalation_id
from trainmedic.recovery.coordinator.kafka_adapter import CoordinatorService
from trainmedic.recovery.executor.config import ExecutorConfig
from trainmedic.recovery.executor.core.admission import AdmissionPolicy
from trainmedic.recovery.executor.report_sockets import job_socket, socket_folder
from trainmedic.recovery.signing import generate
from trainmedic.schemas import (
    Command,
    CommandAcked,
    CommandAction,
    DeadLettered,
    Incident,
    JobSpec,
    NodeDrained,
    NodeReadmitted,
    RecoveryKind,
    RecoveryPlanned,
    WorkerFailed,
    encode,
)

pytestmark = pytest.mark.kafka

NODES = ("n1", "n2", "n3")
CONFIG = CoordinatorConfig(tick_s=0.2, ack_timeout_s=5.0, max_retries=1, default_address="127.0.0.1",
                           nodes=tuple(NodeConfig(id=n, switch="leaf-1") for n in NODES))
# The legitimate job's ranks may run `sleep`; nothing else is admitted.
POLICY = AdmissionPolicy(allowed_executables=("sleep",))


@dataclass
class Stack:
    admin: KafkaSettings
    keys: Keys
    coordinator: CoordinatorService
    lock: threading.Lock
    marker: Path  # what the attacker's program would create
    ranks: dict[str, list[int]]  # the legitimate ranks' pids, per node
    root: Path  # the executors' state folders are ROOT/NODE

    def as_role(self, role: str) -> KafkaSettings:
        return KafkaSettings.from_env(role=role, bootstrap=self.admin.bootstrap,
                                      topic_prefix=self.admin.topic_prefix)

    def read(self, suffix: str) -> list:
        with TopicReader(self.admin, [self.admin.topics.name(suffix)], end=NOW, validate=True) as reader:
            return [r.event for batch in reader.batches() for r in batch]

    def raw(self, suffix: str) -> list:
        with TopicReader(self.admin, [self.admin.topics.name(suffix)], end=NOW, validate=True) as reader:
            return [r for batch in reader.batches() for r in batch if not isinstance(r, DeadLettered)]

    def evil(self) -> tuple[str, ...]:
        return ("sh", "-c", f"touch {self.marker}")


def _coordinate(service: CoordinatorService, lock: threading.Lock, stop: threading.Event) -> None:
    while not stop.is_set():
        with lock:
            service.step(0.1)
        time.sleep(0.05)


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    assert (credentials_dir() / "admin.json").exists(), (
        f"no role credentials in {credentials_dir()}: the attack suite needs the project's secure "
        "broker (`trainmedic broker start`), not a plain one")
    tmp = tmp_path_factory.mktemp("attacks")
    admin = KafkaSettings.from_env(role="admin", bootstrap=kafka_bootstrap,
                                   topic_prefix=f"t{uuid.uuid4().hex[:10]}.")
    create_topics(admin, partitions=2)
    grant_roles(admin, admin.topic_prefix)
    keys = Keys(tmp / "keys", nodes=NODES, deployment=admin.topic_prefix)
    as_role = lambda role: KafkaSettings.from_env(role=role, bootstrap=kafka_bootstrap,  # noqa: E731
                                                  topic_prefix=admin.topic_prefix)
    executors = [RunningExecutor(ExecutorConfig(
        node=n, state_dir=tmp / n, trusted=keyring.load_trusted(keys.folder), node_key=keys.nodes[n].key,
        stop_grace_s=2.0, admission=POLICY, warm_start=False), as_role("executor")) for n in NODES]
    spec = JobSpec(id="llm", nodes=("n1", "n2"), throughput={2: 2.0e15}, command=("sleep", "600"))
    with EventProducer(as_role("operator")) as producer:
        producer.send(admin.topics.jobs, keys.job(spec), key=spec.id)
    # an earlier leader, so that a command of an older epoch exists to be replayed
    leading(as_role("coordinator"), CONFIG, sign=keys.coordinator.sign, trust=keys.trust).close()
    coordinator = leading(as_role("coordinator"), CONFIG, sign=keys.coordinator.sign, trust=keys.trust)
    coordinator.start()
    lock, stop = threading.Lock(), threading.Event()
    thread = threading.Thread(target=_coordinate, args=(coordinator, lock, stop), daemon=True)
    thread.start()
    try:
        wait_until(lambda: coordinator.state.jobs.get("llm") is not None
                   and coordinator.state.jobs["llm"].state is JobState.RUNNING, 60.0, "the job runs")
        ranks = {n: wait_until(lambda n=n: _ranks(tmp, n), 30.0, f"a rank on {n}") for n in ("n1", "n2")}
        yield Stack(admin, keys, coordinator, lock, tmp / "pwned", ranks, tmp)
    finally:
        stop.set()
        thread.join(30)
        coordinator.close()
        for ex in executors:
            ex.stop()
        ours = [name for name in list_topics(admin) if name.startswith(admin.topic_prefix)]
        delete_topics(admin, ours)
        revoke_roles(admin, admin.topic_prefix)


def _ranks(root: Path, node: str) -> list[int]:
    """The ranks the executor of ROOT/NODE launched (in its jobs' cgroups, not their launchers)."""
    return sorted(ranks_of(root / node))


def unverified(kind: str, reason: str) -> tuple[str, dict[str, str]]:
    return "trainmedic_coordinator_unverified_records_total", {"type": kind, "reason": reason}


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


# -- the attacker's means ----------------------------------------------------------------------

def broker_refuses(s: Stack, role: str, suffix: str, event) -> None:
    """`role`'s principal writes `event` to `suffix`: the broker must refuse it, and log the denial."""
    log = home() / "broker" / "broker.log"
    start = log.stat().st_size
    errors: list = []
    producer = clients.producer(s.as_role(role), {"message.timeout.ms": 10_000})
    producer.produce(s.admin.topics.name(suffix), event.model_dump_json().encode(), key=b"k",
                     on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(15)
    assert errors and errors[0] is not None, f"the broker took {role}'s write to {suffix}"
    assert errors[0].name() == "TOPIC_AUTHORIZATION_FAILED", errors[0]

    def denied() -> bool:
        with open(log, "rb") as f:
            f.seek(start)
            return f"Principal = User:{role} is Denied".encode() in f.read()
    wait_until(denied, 10.0, f"the broker's log names {role}'s denied write")


def dead_letter(s: Stack, suffix: str, event, *, role: str, key: str, reason: str,
                counter: tuple[str, dict[str, str]]) -> None:
    """`role` writes `event` where it may: the coordinator must dead-letter it with `reason`, count it."""
    name, labels = counter
    before = metric(name, **labels)
    topic = s.admin.topics.name(suffix)

    def letters() -> int:
        return len([d for d in s.read("dlq") if d.source_topic == topic and reason in d.reason])
    already = letters()
    with EventProducer(s.as_role(role)) as producer:
        producer.send(topic, event, key=key)
    wait_until(lambda: letters() > already, 30.0, f"{reason!r} in the dlq")
    wait_until(lambda: metric(name, **labels) > before, 10.0, f"{name}{labels} counted")


def command_refused(s: Stack, command: Command, reason: str, counter: str | None = None, *,
                    ack_id: str | None = None) -> None:
    """`command` written with the coordinator's Kafka principal (stolen; not its key): the node's
    executor must ack it `refused` with `reason`, counted."""
    before = metric("trainmedic_executor_acks_total", status="refused")
    counted = metric(counter) if counter else 0.0
    with EventProducer(s.as_role("coordinator")) as producer:
        producer.send(s.admin.topics.commands, command, key=command.node)
    ack_id = ack_id or command.id
    acks = wait_until(lambda: [a for a in s.read("acks")  # acks only: nodes report their joins here too
                               if a.type == "ack" and a.command_id == ack_id and a.status == "refused"],
                      30.0, f"{ack_id} refused")
    assert reason in acks[0].reason, acks[0].reason
    assert metric("trainmedic_executor_acks_total", status="refused") > before
    if counter:
        assert metric(counter) > counted


def legit_start(s: Stack, node: str) -> tuple[Command, bytes]:
    """The coordinator's signed start of the job on `node`, as the log holds it (object and bytes)."""
    record = next(r for r in s.raw("commands") if r.event.node == node and r.event.action == "start"
                  and r.event.job == "llm" and r.event.signature)
    return record.event, record.value


def _forged_plan() -> RecoveryPlanned:
    return RecoveryPlanned(ts=time.time(), plan_id=f"forged-{uuid.uuid4().hex[:6]}", job="llm",
                           kind=RecoveryKind.RECONFIGURE, generation=1, nodes=("n3", "n2"),
                           previous=("n1", "n2"), isolated={"n1": "x"})


def _sev1(node: str) -> Incident:
    return Incident(ts=time.time(), id=f"inc-forged-{uuid.uuid4().hex[:6]}", status="open",
                    category="gpu_lost", severity="SEV1", action="reconfigure", job="llm", node=node,
                    ranks=(0,), first_ts=time.time(), evidence=("Xid 79 (forged)",))


def _evil_start(s: Stack, node: str = "n3", **changes) -> Command:
    base = legit_start(s, "n1")[0]
    return base.model_copy(update={
        "id": f"evil-{uuid.uuid4().hex[:8]}", "ts": time.time(), "node": node, "job": "evil",
        "signature": None, "key_id": None, "worker": base.worker.model_copy(update={"command": s.evil()}),
        **changes})


def _ack(s: Stack, node: str, status: str) -> CommandAcked:
    c = legit_start(s, node)[0]
    return CommandAcked(ts=time.time(), node=node, command_id=c.id, job=c.job, generation=c.generation,
                        status=status, reason="planted")


# -- the catalogue -----------------------------------------------------------------------------

def a_process_that_is_no_rank_reports_for_the_job(s: Stack) -> None:
    """Ranks hold no Kafka credentials: they report over their job's socket of their executor, which
    root (and the job's group) can reach. A process that is no rank the executor launched (nor a
    child of one) is heard and never published: a crash of the job's rank 0, forged, restarts
    nothing."""
    before = metric("trainmedic_executor_rank_reports_total", outcome="unknown_process")
    forged = WorkerFailed(ts=time.time(), node="n1", job="llm", rank=0, world_size=2, generation=0,
                          error="RuntimeError: forged")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(job_socket(socket_folder(s.root / "n1"), "llm")))
        sock.sendall(encode(forged) + b"\n")
        wait_until(lambda: metric("trainmedic_executor_rank_reports_total", outcome="unknown_process")
                   > before, 20.0, "the stranger's report refused")
    assert not [e for e in s.read("telemetry.worker") if getattr(e, "error", None) == forged.error]


def super_user_writes_an_unsigned_plan_on_recovery(s: Stack) -> None:
    """The broker's super user may write any topic: the coordinator folds a decision only when its
    own key signed it, for this deployment."""
    dead_letter(s, "recovery", _forged_plan(), role="admin", key="llm",
                reason="recovery_planned not signed by this coordinator",
                counter=unverified("recovery_planned", "unsigned"))


def node_agent_writes_an_incident(s: Stack) -> None:
    broker_refuses(s, "agent", "incidents", _sev1("n2"))


def executor_writes_a_command(s: Stack) -> None:
    broker_refuses(s, "executor", "commands", _evil_start(s))


def detector_writes_a_plan_on_recovery(s: Stack) -> None:
    broker_refuses(s, "detector", "recovery", _forged_plan())


def alert_bridge_submits_a_job(s: Stack) -> None:
    spec = JobSpec(id="evil", nodes=("n3",), throughput={1: 1.0e15}, command=s.evil())
    broker_refuses(s, "ops", "jobs", s.keys.job(spec))


def unauthenticated_client_writes_an_incident(s: Stack) -> None:
    plain = KafkaSettings(bootstrap=s.admin.bootstrap, topic_prefix=s.admin.topic_prefix)
    errors: list = []
    producer = clients.producer(plain, {"message.timeout.ms": 5_000})
    producer.produce(s.admin.topics.incidents, _sev1("n1").model_dump_json().encode(),
                     on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None, "a client without credentials wrote to incidents"


def detector_writes_a_plan_on_incidents(s: Stack) -> None:
    dead_letter(s, "incidents", _forged_plan(), role="detector", key="llm",
                reason="a recovery_planned belongs on the recovery topic, never on incidents",
                counter=("trainmedic_coordinator_misplaced_records_total", {"topic": "incidents"}))


def detector_presolves_the_coordinators_escalation(s: Stack) -> None:
    """The escalation a failed start would raise has a predictable id: resolved in advance, it
    would stand in for the coordinator's own and silence it."""
    event = Incident(ts=time.time(), id=escalation_id(legit_start(s, "n1")[0].id), status="resolved",
                     category="start_failed", severity="SEV1", action="reconfigure", job="llm", node="n1",
                     first_ts=time.time())
    dead_letter(s, "incidents", event, role="detector", key="llm",
                reason="is one only the coordinator raises: it belongs on the recovery topic",
                counter=("trainmedic_coordinator_misplaced_records_total", {"topic": "incidents"}))


def operator_principal_writes_a_readmission(s: Stack) -> None:
    event = NodeReadmitted(ts=time.time(), node="n1", incident_id="x", reason="forged")
    dead_letter(s, "nodes", event, role="operator", key="n1",
                reason="a node_readmitted belongs on the recovery topic, never on nodes",
                counter=("trainmedic_coordinator_misplaced_records_total", {"topic": "nodes"}))


def unsigned_job_runs_a_shell_on_an_idle_node(s: Stack) -> None:
    job = s.keys.job(JobSpec(id="evil", nodes=("n3",), throughput={1: 1.0e15}, command=s.evil(),
                             weight=1000.0)).model_copy(update={"signature": None, "key_id": None})
    dead_letter(s, "jobs", job, role="operator", key="evil", reason="unsigned",
                counter=unverified("job_submitted", "unsigned"))


def job_signed_by_a_node_key(s: Stack) -> None:
    job = s.keys.nodes["n3"].sign(s.keys.job(JobSpec(id="evil", nodes=("n3",), throughput={1: 1.0e15},
                                                     command=s.evil())))
    dead_letter(s, "jobs", job, role="operator", key="evil", reason="unknown key id",
                counter=unverified("job_submitted", "unknown_key"))


def signed_job_on_an_invented_node(s: Stack) -> None:
    job = s.keys.job(JobSpec(id="evil", nodes=("n9",), throughput={1: 1.0e15}, command=("sleep", "1")))
    dead_letter(s, "jobs", job, role="operator", key="evil", reason="n9",
                counter=("trainmedic_coordinator_rejected_records_total", {"type": "job_submitted"}))


def unsigned_drain_of_a_busy_node(s: Stack) -> None:
    dead_letter(s, "nodes", NodeDrained(ts=time.time(), node="n1", reason="forged"), role="operator",
                key="n1", reason="unsigned",
                counter=unverified("node_drained", "unsigned"))


def failed_ack_signed_by_another_node(s: Stack) -> None:
    ack = s.keys.nodes["n2"].sign(_ack(s, "n1", "failed"))
    dead_letter(s, "acks", ack, role="executor", key="n1", reason="wrong node",
                counter=unverified("ack", "wrong_node"))


def unsigned_failed_ack(s: Stack) -> None:
    dead_letter(s, "acks", _ack(s, "n2", "failed"), role="executor", key="n2", reason="unsigned",
                counter=unverified("ack", "unsigned"))


def forged_copy_of_a_command_for_the_coordinator_to_resign(s: Stack) -> None:
    forged = _evil_start(s, job="llm", id=legit_start(s, "n1")[0].id)
    dead_letter(s, "commands", forged, role="coordinator", key="n3", reason="not signed by this coordinator",
                counter=unverified("command", "unsigned"))


def unsigned_command(s: Stack) -> None:
    command_refused(s, _evil_start(s), "unsigned", "trainmedic_executor_unverified_commands_total")


def command_signed_by_an_attackers_key(s: Stack) -> None:
    command_refused(s, generate().sign(_evil_start(s)), "unknown key id",
                    "trainmedic_executor_unverified_commands_total")


def command_signed_by_a_node_key(s: Stack) -> None:
    command_refused(s, s.keys.nodes["n3"].sign(_evil_start(s)), "unknown key id",
                    "trainmedic_executor_unverified_commands_total")


def signed_command_with_its_argv_changed(s: Stack) -> None:
    command = s.keys.coordinator.sign(_evil_start(s, worker=legit_start(s, "n1")[0].worker))
    worker = command.worker.model_copy(update={"command": s.evil()})
    command_refused(s, command.model_copy(update={"worker": worker}), "bad signature",
                    "trainmedic_executor_unverified_commands_total")


def signed_command_readdressed_to_another_node(s: Stack) -> None:
    command = s.keys.coordinator.sign(_evil_start(s, worker=legit_start(s, "n1")[0].worker, node="n2"))
    command_refused(s, command.model_copy(update={"node": "n3"}), "bad signature",
                    "trainmedic_executor_unverified_commands_total")


def stale_signed_command_replayed(s: Stack) -> None:
    # a real command of an hour ago, captured and sent again
    old = s.keys.coordinator.sign(_evil_start(s, ts=time.time() - 3600, worker=legit_start(s, "n1")[0].worker,
                                              epoch=s.coordinator.epoch))
    command_refused(s, old, "stale")


def signed_command_of_an_older_epoch(s: Stack) -> None:
    stop = Command(ts=time.time(), node="n1", id=f"old-epoch-{uuid.uuid4().hex[:6]}", job="llm", generation=0,
                   action=CommandAction.STOP, epoch=s.coordinator.epoch - 1)
    command_refused(s, s.keys.coordinator.sign(stop), "fenced")


def applied_command_replayed(s: Stack) -> None:
    command, raw = legit_start(s, "n1")

    def answers() -> list[str]:  # n1's own answers (earlier attacks planted others under this id)
        return [a.status for a in s.read("acks") if a.type == "ack" and a.command_id == command.id
                and a.node == "n1" and a.reason != "planted"]
    before = answers()
    producer = clients.producer(s.as_role("coordinator"), {})
    producer.produce(s.admin.topics.commands, raw, key=b"n1")
    producer.flush(10)
    # answered again with its recorded ack, never applied twice (the ranks' pids are checked below)
    wait_until(lambda: len(answers()) > len(before), 30.0, "the replay answered from the ledger")
    assert before == ["accepted", "done"] and answers()[2:] == ["done"]


def operator_signed_shell_job(s: Stack) -> None:
    """A stolen operator key: the coordinator starts the job, the node's admission policy refuses it."""
    before = metric("trainmedic_executor_admission_refusals_total", rule="executable")
    spec = JobSpec(id="evil-admitted", nodes=("n3",), throughput={1: 1.0e15}, command=s.evil())
    with EventProducer(s.as_role("operator")) as producer:
        producer.send(s.admin.topics.jobs, s.keys.job(spec), key=spec.id)
    def refused() -> list:
        return [a for a in s.read("acks")
                if a.type == "ack" and a.job == "evil-admitted" and a.status == "refused"]
    acks = wait_until(refused, 30.0, "n3 refuses the shell")
    assert "admission policy" in acks[0].reason, acks[0].reason
    assert metric("trainmedic_executor_admission_refusals_total", rule="executable") > before


ATTACKS = [a_process_that_is_no_rank_reports_for_the_job, super_user_writes_an_unsigned_plan_on_recovery,
           node_agent_writes_an_incident,
           executor_writes_a_command, detector_writes_a_plan_on_recovery, alert_bridge_submits_a_job,
           unauthenticated_client_writes_an_incident, detector_writes_a_plan_on_incidents,
           detector_presolves_the_coordinators_escalation,
           operator_principal_writes_a_readmission, unsigned_job_runs_a_shell_on_an_idle_node,
           job_signed_by_a_node_key, signed_job_on_an_invented_node, unsigned_drain_of_a_busy_node,
           failed_ack_signed_by_another_node, unsigned_failed_ack,
           forged_copy_of_a_command_for_the_coordinator_to_resign, unsigned_command,
           command_signed_by_an_attackers_key, command_signed_by_a_node_key,
           signed_command_with_its_argv_changed, signed_command_readdressed_to_another_node,
           stale_signed_command_replayed, signed_command_of_an_older_epoch, applied_command_replayed,
           operator_signed_shell_job]


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.__name__ for a in ATTACKS])
def test_the_attack_is_refused_and_changes_nothing(stack: Stack, attack) -> None:
    attack(stack)
    time.sleep(1.0)  # a few coordinator ticks: anything it would (wrongly) do for the attack
    with stack.lock:
        state = stack.coordinator.state
        assert [n for n in NODES if not state.healthy(n)] == []
        assert {n.id: n.mode.value for n in state.nodes.values()} == dict.fromkeys(NODES, "ready")
        job = state.jobs["llm"]
        assert (job.state, job.generation, job.nodes) == (JobState.RUNNING, 0, ("n1", "n2"))
        assert [j for j in state.jobs if j not in ("llm", "evil-admitted")] == []
    assert not stack.marker.exists(), "the attacker's program ran"
    assert {n: _ranks(stack.root, n) for n in ("n1", "n2")} == stack.ranks  # never restarted
    assert _ranks(stack.root, "n3") == []
    trusted = keyring.load_trusted(stack.keys.folder)
    planted = ("evil-", "old-epoch-")  # the ids of what attacks signed with a captured key
    signed = [r.event for r in stack.raw("commands") if trusted.check(r.value) is None
              and not r.event.id.startswith(planted)]
    assert {(c.job, c.node, c.action, c.generation) for c in signed} <= {
        ("llm", "n1", "start", 0), ("llm", "n2", "start", 0), ("evil-admitted", "n3", "start", 0)}
