"""Each generation's rendezvous secret and port: the same in every command of a generation and for a
coordinator that restarts with the same key, another for every generation and submission, derived
from the coordinator's signing key only, and never part of the state a log folds to."""

from __future__ import annotations

from tests.unit.coordinator.world import CONFIG, incident, submitted
from trainmedic.recovery.coordinator.core import ClusterState, react
from trainmedic.recovery.coordinator.core.rendezvous import PORTS, rendezvous
from trainmedic.recovery.coordinator.rendezvous import rendezvous_root
from trainmedic.recovery.signing import generate

KEY = generate()


def launched(root: bytes) -> dict[int, set[tuple[str | None, int]]]:
    """generation -> the (key, port) pairs its commands carry, for one job started and re-planned."""
    state = ClusterState.initial(CONFIG, root)
    log = react(state, submitted(), 0.0) + react(state, incident("i-1", "SEV1", node="n2",
                                                                   category="gpu_lost"), 50.0)
    found: dict[int, set] = {}
    for command in (e for e in log if e.type == "command" and e.worker is not None):
        found.setdefault(command.generation, set()).add((command.worker.rendezvous_key,
                                                         command.worker.master_port))
    return found


def test_every_command_of_a_generation_carries_one_key_and_port_and_each_generation_its_own():
    root = rendezvous_root(KEY)
    found = launched(root)
    assert sorted(found) == [0, 1] and all(len(pairs) == 1 for pairs in found.values())
    (key0, port0), (key1, _) = found[0].copy().pop(), found[1].copy().pop()
    assert len(key0) == 64 and key0 != key1 and 29600 <= port0 < 29600 + PORTS  # world.py's master_port
    assert launched(rendezvous_root(KEY)) == found  # a coordinator that restarts with the key


def test_only_the_signing_key_derives_them():
    assert launched(rendezvous_root(generate())) != launched(rendezvous_root(KEY))
    assert rendezvous_root(None) != rendezvous_root(None)  # insecure: a key of its own process


def test_submissions_and_generations_spread_over_the_port_range():
    root = rendezvous_root(KEY)
    keys = {rendezvous(root, "j", s, g, 29500)[0] for s in ("s1", "s2") for g in range(50)}
    assert len(keys) == 100
    assert len({rendezvous(root, "j", "s1", g, 29500)[1] for g in range(50)}) > 40
    assert 65500 <= rendezvous(root, "j", "s1", 1, 65500)[1] <= 65535  # near the top, still a port


def test_the_root_is_not_part_of_the_folded_state():
    assert ClusterState.initial(CONFIG, b"a" * 32) == ClusterState.initial(CONFIG, b"b" * 32)
    assert "rendezvous_root" not in repr(ClusterState.initial(CONFIG, b"a" * 32))
