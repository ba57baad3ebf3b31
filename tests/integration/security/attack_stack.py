"""The stack the attack suite attacks: three nodes, a coordinator that checks signatures, one job.

`Stack` is what every attack and the suite's after-check hold; `rank_pids` names the ranks an
executor launched, so that a restart shows as new pids.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from tests.integration.executor.conftest import ranks_of
from tests.integration.test_coordinator import Keys
from trainmedic.bus.reader import NOW, TopicReader
from trainmedic.bus.settings import KafkaSettings
from trainmedic.recovery.coordinator.core import CoordinatorConfig, NodeConfig
from trainmedic.recovery.coordinator.kafka_adapter import CoordinatorService
from trainmedic.recovery.executor.core.admission import AdmissionPolicy
from trainmedic.schemas import DeadLettered

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


def rank_pids(root: Path, node: str) -> list[int]:
    """The ranks the executor of ROOT/NODE launched (in its jobs' cgroups, not their launchers)."""
    return sorted(ranks_of(root / node))
