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
never ran (it would create a marker file). `ATTACKS` (attack_catalogue.py) is the catalogue
docs/security.md counts; attack_means.py holds how each attack writes and is seen refused.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.helpers.waiting import wait_until
from tests.integration.executor.conftest import RunningExecutor
from tests.integration.security.attack_catalogue import ATTACKS
from tests.integration.security.attack_stack import CONFIG, NODES, POLICY, Stack, rank_pids
from tests.integration.test_coordinator import Keys, leading
from trainmedic.bus.admin import create_topics, delete_topics, grant_roles, list_topics, revoke_roles
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings, credentials_dir
from trainmedic.recovery import keyring
from trainmedic.recovery.coordinator.core import JobState
from trainmedic.recovery.coordinator.kafka_adapter import CoordinatorService
from trainmedic.recovery.executor.config import ExecutorConfig
from trainmedic.schemas import JobSpec

pytestmark = pytest.mark.kafka


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
        ranks = {n: wait_until(lambda n=n: rank_pids(tmp, n), 30.0, f"a rank on {n}") for n in ("n1", "n2")}
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
    assert {n: rank_pids(stack.root, n) for n in ("n1", "n2")} == stack.ranks  # never restarted
    assert rank_pids(stack.root, "n3") == []
    trusted = keyring.load_trusted(stack.keys.folder)
    planted = ("evil-", "old-epoch-")  # the ids of what attacks signed with a captured key
    signed = [r.event for r in stack.raw("commands") if trusted.check(r.value) is None
              and not r.event.id.startswith(planted)]
    assert {(c.job, c.node, c.action, c.generation) for c in signed} <= {
        ("llm", "n1", "start", 0), ("llm", "n2", "start", 0), ("evil-admitted", "n3", "start", 0)}
