"""The attacks of issue 14, one function each: `ATTACKS` is the catalogue docs/security.md counts.

Each attack uses the credentials and keys its attacker would hold and checks that it was refused
where docs/security.md says; the suite then checks that it changed nothing.
"""

from __future__ import annotations

import socket
import time
import uuid

from tests.helpers.waiting import wait_until
from tests.integration.security.attack_means import (
    broker_refuses,
    command_refused,
    dead_letter,
    evil_start,
    forged_plan,
    legit_start,
    metric,
    planted_ack,
    sev1,
    unverified,
)
from tests.integration.security.attack_stack import Stack
from trainmedic.bus import clients
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.recovery.coordinator.core.commands import escalation_id
from trainmedic.recovery.executor.report_sockets import job_socket, socket_folder
from trainmedic.recovery.signing import generate
from trainmedic.schemas import (
    Command,
    CommandAction,
    Incident,
    JobSpec,
    NodeDrained,
    NodeReadmitted,
    WorkerFailed,
    encode,
)


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
    dead_letter(s, "recovery", forged_plan(), role="admin", key="llm",
                reason="recovery_planned not signed by this coordinator",
                counter=unverified("recovery_planned", "unsigned"))


def node_agent_writes_an_incident(s: Stack) -> None:
    broker_refuses(s, "agent", "incidents", sev1("n2"))


def executor_writes_a_command(s: Stack) -> None:
    broker_refuses(s, "executor", "commands", evil_start(s))


def detector_writes_a_plan_on_recovery(s: Stack) -> None:
    broker_refuses(s, "detector", "recovery", forged_plan())


def alert_bridge_submits_a_job(s: Stack) -> None:
    spec = JobSpec(id="evil", nodes=("n3",), throughput={1: 1.0e15}, command=s.evil())
    broker_refuses(s, "ops", "jobs", s.keys.job(spec))


def unauthenticated_client_writes_an_incident(s: Stack) -> None:
    plain = KafkaSettings(bootstrap=s.admin.bootstrap, topic_prefix=s.admin.topic_prefix)
    errors: list = []
    producer = clients.producer(plain, {"message.timeout.ms": 5_000})
    producer.produce(s.admin.topics.incidents, sev1("n1").model_dump_json().encode(),
                     on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None, "a client without credentials wrote to incidents"


def detector_writes_a_plan_on_incidents(s: Stack) -> None:
    dead_letter(s, "incidents", forged_plan(), role="detector", key="llm",
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
    ack = s.keys.nodes["n2"].sign(planted_ack(s, "n1", "failed"))
    dead_letter(s, "acks", ack, role="executor", key="n1", reason="wrong node",
                counter=unverified("ack", "wrong_node"))


def unsigned_failed_ack(s: Stack) -> None:
    dead_letter(s, "acks", planted_ack(s, "n2", "failed"), role="executor", key="n2", reason="unsigned",
                counter=unverified("ack", "unsigned"))


def forged_copy_of_a_command_for_the_coordinator_to_resign(s: Stack) -> None:
    forged = evil_start(s, job="llm", id=legit_start(s, "n1")[0].id)
    dead_letter(s, "commands", forged, role="coordinator", key="n3", reason="not signed by this coordinator",
                counter=unverified("command", "unsigned"))


def unsigned_command(s: Stack) -> None:
    command_refused(s, evil_start(s), "unsigned", "trainmedic_executor_unverified_commands_total")


def command_signed_by_an_attackers_key(s: Stack) -> None:
    command_refused(s, generate().sign(evil_start(s)), "unknown key id",
                    "trainmedic_executor_unverified_commands_total")


def command_signed_by_a_node_key(s: Stack) -> None:
    command_refused(s, s.keys.nodes["n3"].sign(evil_start(s)), "unknown key id",
                    "trainmedic_executor_unverified_commands_total")


def signed_command_with_its_argv_changed(s: Stack) -> None:
    command = s.keys.coordinator.sign(evil_start(s, worker=legit_start(s, "n1")[0].worker))
    worker = command.worker.model_copy(update={"command": s.evil()})
    command_refused(s, command.model_copy(update={"worker": worker}), "bad signature",
                    "trainmedic_executor_unverified_commands_total")


def signed_command_readdressed_to_another_node(s: Stack) -> None:
    command = s.keys.coordinator.sign(evil_start(s, worker=legit_start(s, "n1")[0].worker, node="n2"))
    command_refused(s, command.model_copy(update={"node": "n3"}), "bad signature",
                    "trainmedic_executor_unverified_commands_total")


def stale_signed_command_replayed(s: Stack) -> None:
    # a real command of an hour ago, captured and sent again
    old = s.keys.coordinator.sign(evil_start(s, ts=time.time() - 3600, worker=legit_start(s, "n1")[0].worker,
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
