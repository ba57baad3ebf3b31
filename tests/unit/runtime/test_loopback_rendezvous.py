"""A rank of a job that spans nodes, on a node with a data address, whose MASTER_ADDR is loopback stops at
once saying what to fix (issue 44): before, it bound loopback and the job "never completed a step".
Ranks of a simulated cluster (every node on 127.0.0.1, no data address) are not stopped."""

from __future__ import annotations

import pytest

from trainmedic.common.errors import ConfigError
from trainmedic.runtime.env import WorkerEnv, loopback_rendezvous
from trainmedic.runtime.rendezvous import generation_store

TWO_NODES = {"MASTER_ADDR": "node-0", "MASTER_PORT": "29500", "RANK": "2", "WORLD_SIZE": "4",
             "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "TRAINMEDIC_JOB": "llm", "TRAINMEDIC_NODE": "node-1",
             "TRAINMEDIC_NODE_ADDRESS": "10.0.0.2", "TRAINMEDIC_RENDEZVOUS_KEY": "ab" * 32}


def problem(env: dict[str, str], resolves_to: str | None) -> str | None:
    return loopback_rendezvous(WorkerEnv.from_env(env), lambda host: [] if resolves_to is None else
                               [resolves_to, "10.0.0.1"])


def test_a_loopback_master_in_a_job_of_several_nodes_is_refused_saying_what_to_fix() -> None:
    said = problem(TWO_NODES, "127.0.1.1")  # a host name /etc/hosts gives 127.0.1.1, as Debian's does
    assert said is not None
    assert "MASTER_ADDR=node-0 is 127.0.1.1 (loopback) on node node-1, whose data address is 10.0.0.2" in said
    assert "its job spans nodes (4 ranks, 2 here)" in said
    assert "`address:` the other nodes reach in the coordinator's nodes config" in said
    assert "`default_address`" in said
    assert problem(TWO_NODES, "::1") is not None


@pytest.mark.parametrize(("change", "resolves_to"), [
    ({}, "10.0.0.1"),  # a master the other nodes reach
    ({}, None),  # unresolvable here: the rendezvous says so itself
    ({"TRAINMEDIC_NODE_ADDRESS": ""}, "127.0.0.1"),  # no data address: a simulated cluster, as before
    ({"TRAINMEDIC_NODE_ADDRESS": "127.0.0.1"}, "127.0.0.1"),  # a node on loopback itself
    ({"WORLD_SIZE": "2"}, "127.0.0.1"),  # every rank on this node
])
def test_what_can_meet_is_not_refused(change: dict[str, str], resolves_to: str | None) -> None:
    assert problem({**TWO_NODES, **change}, resolves_to) is None


def test_the_node_address_travels_in_the_contract() -> None:
    contract = WorkerEnv.from_env(TWO_NODES)
    assert contract.node_address == "10.0.0.2"
    assert contract.to_env()["TRAINMEDIC_NODE_ADDRESS"] == "10.0.0.2"
    assert "TRAINMEDIC_NODE_ADDRESS" not in WorkerEnv.from_env({**TWO_NODES,
                                                                "TRAINMEDIC_NODE_ADDRESS": ""}).to_env()


def test_the_rank_stops_before_its_rendezvous_with_the_real_resolver() -> None:
    contract = WorkerEnv.from_env({**TWO_NODES, "MASTER_ADDR": "127.0.0.1"})
    with pytest.raises(ConfigError, match=r"MASTER_ADDR=127\.0\.0\.1 is 127\.0\.0\.1 \(loopback\)"):
        generation_store(contract, 30.0)  # at once, not after the 30 s of connecting again
