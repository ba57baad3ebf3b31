"""ranks_finished: claimed once for a generation whose ranks this executor launched and saw exit 0,
never for ranks it adopted after a restart (their exit status went to another reaper)."""

from __future__ import annotations

import time
from pathlib import Path

from tests.helpers.waiting import wait_until
from trainmedic.bus.message import Record
from trainmedic.bus.settings import KafkaSettings
from trainmedic.recovery.executor.command_loop import Executor
from trainmedic.recovery.executor.config import ExecutorConfig
from trainmedic.recovery.executor.core.admission import AdmissionPolicy
from trainmedic.recovery.executor.ledger import Ledger
from trainmedic.recovery.signing import TrustedKeys, generate
from trainmedic.schemas import Command, CommandAction, RanksFinished, WorkerExited, WorkerSpec, encode

COORDINATOR, NODE_KEY = generate(), generate()
# Each rank waits for a file named GO in its workdir, then exits 0.
WAIT_THEN_EXIT_0 = ("sh", "-c", "while [ ! -e GO ]; do sleep 0.05; done; exit 0")


class RecordingExecutor(Executor):
    """The real executor, ledger and supervisor on `state_dir`; what it sends is kept, not sent."""

    def __init__(self, state_dir: Path) -> None:
        config = ExecutorConfig(node="n1", state_dir=state_dir, node_key=NODE_KEY,
                                trusted=TrustedKeys.of(COORDINATOR.private.public_key()),
                                warm_start=False, stop_grace_s=0.2,
                                admission=AdmissionPolicy(allowed_executables=("sh",)))
        super().__init__(config, KafkaSettings.from_env({"TRAINMEDIC_KAFKA_BOOTSTRAP": "127.0.0.1:1"}))
        self.sent: list = []
        self.producer.send = lambda topic, event, key: self.sent.append(event)
        self.applier.ledger = Ledger.open(config.ledger_path("t."))
        self.reporter.start()  # as `run` does: the jobs' sockets are in the ranks' environment

    def of(self, kind: type) -> list:
        return [e for e in self.sent if isinstance(e, kind)]


def start(workdir: Path, generation: int) -> Record:
    worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                        ranks=(4, 5), world_size=6, master_addr="h", master_port=1, command=WAIT_THEN_EXIT_0,
                        workdir=str(workdir))
    command = COORDINATOR.sign(Command(ts=time.time(), node="n1", id=f"g{generation}", job="j",
                                       deployment="trainmedic.",  # the executor's topic prefix
                                       generation=generation, action=CommandAction.START, worker=worker))
    return Record("t.commands", 0, generation, "n1", command, encode(command))


def test_a_launched_generation_is_finished_once_and_an_adopted_one_never(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    first = RecordingExecutor(tmp_path / "state")
    first._handle(start(work, 0))
    (work / "GO").touch()
    wait_until(lambda: first._reap() or len(first.of(WorkerExited)) == 2, 30, "generation 0's ranks")
    (finished,) = first.of(RanksFinished)
    assert (finished.job, finished.generation, finished.ranks) == ("j", 0, (4, 5))
    assert TrustedKeys.of(NODE_KEY.private.public_key()).check(encode(finished), "report") is None
    first._reap()
    assert len(first.of(RanksFinished)) == 1  # once

    (work / "GO").unlink()
    first._handle(start(work, 1))
    first.applier.ledger.close()  # the executor dies here; its ranks run on
    first.reporter.close()
    second = RecordingExecutor(tmp_path / "state")
    second._take_over()
    assert second.supervisor.alive("j") == 2  # adopted
    (work / "GO").touch()
    wait_until(lambda: second._reap() or len(second.of(WorkerExited)) == 2, 30, "the adopted ranks")
    assert all(e.status_unknown for e in second.of(WorkerExited))
    assert second.of(RanksFinished) == []
    second.applier.ledger.close()
    second.reporter.close()
