"""The executor under 100,000 hostile commands: none raises or stops a rank, each is dead-lettered
with its position in the ledger, and the good commands are applied exactly once.

The real Executor, ledger and supervisor; only its sends are kept in memory instead of going to
Kafka. The ledger lives in /dev/shm where there is one, since it fsyncs every line.
"""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path

from hypothesis import given

from tests.unit.fuzz.hostile import EXAMPLES, FUZZ, PER_EXAMPLE, Tally, atoms, batch, interleave, seeds
from trainmedic.bus.message import parse_message
from trainmedic.bus.settings import KafkaSettings
from trainmedic.recovery.executor.command_loop import Executor
from trainmedic.recovery.executor.config import ExecutorConfig
from trainmedic.recovery.executor.ledger import Ledger
from trainmedic.schemas import Command, CommandAction, DeadLettered, encode

NOW = 1_700_000_000.0
SETTINGS = KafkaSettings.from_env({"TRAINMEDIC_KAFKA_BOOTSTRAP": "127.0.0.1:1",
                                   "TRAINMEDIC_TOPIC_PREFIX": "f."})
TOPIC = SETTINGS.topics.commands
GOOD = [encode(Command(ts=NOW, node="n1", id=f"c{i}", job="j", generation=i, action=CommandAction.STOP))
        for i in range(20)]
TEMPLATES = [json.loads(value) for value in GOOD]
SCRATCH = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
TALLY = Tally()


class InMemoryExecutor(Executor):
    """Sends land in `sent` (topic, event) rather than on a broker."""

    def __init__(self, state_dir: Path) -> None:
        config = ExecutorConfig(node="n1", state_dir=state_dir, insecure=True, warm_start=False)
        super().__init__(config, SETTINGS, clock=lambda: NOW)
        self.sent: list[tuple[str, object]] = []
        self.producer.send = lambda topic, event, key: self.sent.append((topic, event))
        self.applier.ledger = Ledger.open(config.ledger_path("t."))


@FUZZ
@given(seed=seeds, pool=atoms)
def test_hostile_commands_are_dead_lettered_and_read_past(seed: int, pool: list) -> None:
    rng = random.Random(seed)
    bad = batch(rng, TEMPLATES, pool)
    with tempfile.TemporaryDirectory(dir=SCRATCH) as state_dir:
        executor = InMemoryExecutor(Path(state_dir))
        items = interleave(rng, GOOD, bad)
        for offset, (_, value) in enumerate(items):
            executor._handle(parse_message(SETTINGS.topics, TOPIC, 0, offset, b"n1", value, NOW))
        executor.applier.ledger.close()
        letters = [event for topic, event in executor.sent if topic == SETTINGS.topics.dlq]
        acks = [event for topic, event in executor.sent if topic == SETTINGS.topics.acks]
        assert len(letters) == len(bad) and all(isinstance(e, DeadLettered) for e in letters)
        assert [a.command_id for a in acks if a.status == "done"] == [f"c{i}" for i in range(20)]
        ledger = Ledger.open(executor.config.ledger_path("t."))
        assert ledger.state.applied == {f"c{i}" for i in range(20)}
        assert ledger.state.positions == {(TOPIC, 0): len(items)}  # a restart meets none of them again
        ledger.close()
        assert executor.supervisor.alive("j") == 0
    TALLY.thrown += len(bad)


def test_the_executor_took_100k_hostile_commands() -> None:
    if not TALLY.thrown:
        test_hostile_commands_are_dead_lettered_and_read_past()
    print(f"executor: {TALLY.thrown:,} hostile commands, none raised")
    assert TALLY.thrown >= EXAMPLES * PER_EXAMPLE >= 100_000
