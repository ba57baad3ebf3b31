"""Issue 12: no command, and no Kafka error, makes the executor raise or stop its ranks.

The executor here is the real one with real rank processes (`sleep`), a real ledger and a real
librdkafka producer that talks to no broker, so its deliveries time out as they would after a
long outage (`message.timeout.ms` shortened from 5 min to 0.1 s).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainmedic.bus.message import Record, parse_message
from trainmedic.bus.settings import KafkaSettings
from trainmedic.recovery.executor.command_loop import Executor
from trainmedic.recovery.executor.config import ExecutorConfig
from trainmedic.recovery.executor.core.admission import AdmissionPolicy
from trainmedic.recovery.executor.core.decide import Refuse, decide
from trainmedic.recovery.executor.ledger import Ledger
from trainmedic.recovery.executor.python_main import warm_target
from trainmedic.schemas import Command, CommandAction, WorkerSpec, encode

NODE = "n1"


@pytest.fixture
def executor(tmp_path: Path) -> Iterator[Executor]:
    kafka = KafkaSettings.from_env({"TRAINMEDIC_KAFKA_BOOTSTRAP": "127.0.0.1:1",
                                    "TRAINMEDIC_KAFKA_CONFIG": json.dumps({"message.timeout.ms": 100})})
    config = ExecutorConfig(node=NODE, state_dir=tmp_path, insecure=True, warm_start=False, stop_grace_s=0.2,
                            admission=AdmissionPolicy(allowed_executables=("sleep",)))
    ex = Executor(config, kafka)
    ex.applier.ledger = Ledger.open(config.ledger_path("t."))
    ex.reporter.start()  # as `run` does: the jobs' sockets are in the ranks' environment
    yield ex
    ex.supervisor.stop_all(0.2)
    ex.applier.ledger.close()
    ex.reporter.close()


def command(cid: str, action=CommandAction.START, argv=("sleep", "30"), generation=0, **changes) -> Command:
    worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                        ranks=(0,), world_size=1, master_addr="h", master_port=29500, command=("true",))
    worker = worker.model_copy(update={"command": argv})  # as a reader without the bounds would pass it
    return Command(ts=time.time(), node=NODE, id=cid, job="j", generation=generation, action=action,
                   worker=None if action is CommandAction.STOP else worker, **changes)


def record(cmd: Command, offset: int) -> Record:
    return Record("t.commands", 0, offset, NODE, cmd, cmd.model_dump_json().encode())


def test_a_non_ascii_signature_is_refused_not_raised() -> None:
    from trainmedic.recovery.signing import TrustedKeys, generate

    key = generate()
    forged = command("c1", signature="é", key_id=key.key_id)
    trusted = TrustedKeys.of(key.private.public_key())
    decision = decide(forged, received=encode(forged), node=NODE, trusted=trusted, now=forged.ts,
                      freshness_s=60, group=None, applied=())
    assert decision == Refuse(f"bad signature: not made by key {key.key_id} over this command",
                              unverified=True)


def test_a_niceness_int_cannot_read_starts_cold_instead_of_raising() -> None:
    assert warm_target(["nice", "-n", "²", "python", "-m", "train"]) is None
    assert warm_target(["nice", "-n", "5", "/no/python", "-m", "train"]) is None


def test_an_argv_execve_refuses_fails_the_command_and_the_executor_reads_on(executor: Executor) -> None:
    executor._handle(record(command("c1", argv=("sleep", "30\x00")), offset=0))
    ledger = executor.applier.ledger
    assert ledger.state.positions[("t.commands", 0)] == 1 and "c1" in ledger.state.applied
    executor._handle(record(command("c2", generation=1), offset=1))  # the next command still runs
    assert executor.supervisor.alive("j") == 1


def test_a_delivery_timeout_stops_no_rank(executor: Executor) -> None:
    executor._handle(record(command("c1"), offset=0))
    assert executor.supervisor.alive("j") == 1
    time.sleep(0.5)  # the acks of c1 time out: librdkafka reports them as not retriable
    executor.producer.flush()
    executor._handle(record(command("c2", action=CommandAction.REATTEMPT), offset=1))
    assert executor.supervisor.alive("j") == 1
    assert executor.applier.ledger.state.positions[("t.commands", 0)] == 2


def test_a_command_that_raises_while_decided_is_dead_lettered_and_read_past(executor: Executor) -> None:
    raw = command("c1", signature="é").model_dump_json().encode()
    parsed = parse_message(executor.kafka.topics, executor.kafka.topics.commands, 0, 5, b"n1", raw, 0.0)
    broken = Record(parsed.topic, parsed.partition, parsed.offset, parsed.key, object(), raw)
    executor._handle(broken)
    assert executor.applier.ledger.state.positions[(executor.kafka.topics.commands, 0)] == 6


def test_an_invalid_command_is_dead_lettered_and_counted(executor: Executor) -> None:
    from prometheus_client import REGISTRY

    def counted() -> float:
        return REGISTRY.get_sample_value("trainmedic_dead_letters_total", {"service": "executor"}) or 0.0

    before = counted()
    topics = executor.kafka.topics
    executor._handle(parse_message(topics, topics.commands, 0, 3, b"n1", b"not a command", 0.0))
    assert executor.applier.ledger.state.positions[(topics.commands, 0)] == 4
    assert counted() == before + 1  # TrainmedicDeadLetters sees it
