"""A re-plan renumbers the survivors; they must still offer the snapshots they wrote.

Snapshots are written under the rank a process ran (`rank4-g0-step…pt` in its node's snapshot dir),
so a survivor that becomes ranks 2-3 after the re-plan still holds only `rank4-` files: every rank
offers its node's newest of any rank. These tests write those files for real and ask the worker
side what each new rank could restore.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tests.unit.coordinator.world import Recorder, incident, of_type, submitted
from trainmedic.runtime import state_files
from trainmedic.runtime.env import WorkerEnv
from trainmedic.runtime.restore import REPLICA, local_offers

STEP = 57


def started(rec: Recorder, nodes: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """Submit a job on `nodes`, let it start; node -> the ranks it ran at generation 0."""
    commands = rec.feed(submitted(nodes=nodes, throughput={n: n * 1e15 for n in range(1, 7)}), 1.0)
    rec.ack(commands, "accepted", 2.0)
    rec.ack(commands, "done", 3.0)
    return {c.node: c.worker.ranks for c in of_type(commands, "command")}


def write_snapshots(root: Path, ran: dict[str, tuple[int, ...]]) -> None:
    """What the generation-0 ranks left on their nodes: a snapshot per rank at STEP."""
    payload = {"step": STEP, "model": {"w": torch.zeros(1)}, "optimizer": {}}
    for node, ranks in ran.items():
        for rank in ranks:
            state_files.save_keeping(root / node, state_files.snapshot_prefix(rank), 0, STEP, payload, keep=2)


def replica_offers(root: Path, command) -> list:
    """The replica snapshots the ranks of `command` offer at restore, as the worker runtime reads them."""
    spec = command.worker
    offers = []
    for local, rank in enumerate(spec.ranks):
        env = WorkerEnv(master_addr="h", master_port=1, rank=rank, world_size=spec.world_size,
                        local_rank=local, local_world_size=len(spec.ranks), job="llm", node=command.node,
                        generation=command.generation, restore=spec.restore,
                        snapshot_dir=str(root / command.node))
        offers += [o for o in local_offers(env) if o.kind == REPLICA]
    return offers


def test_survivors_renumbered_by_a_sev1_restore_from_the_snapshots_they_wrote(tmp_path) -> None:
    rec = Recorder()
    for i, spare in enumerate(("n5", "n6")):  # no spare left: the job shrinks onto its survivors
        rec.feed(incident(f"spare-{spare}", "SEV1", node=spare, job=None), now=0.1 + i)
    ran = started(rec, ("n1", "n2", "n3", "n4"))
    write_snapshots(tmp_path, ran)

    out = rec.feed(incident("xid", "SEV1", node="n2"), now=100.0)  # a middle node, not the last
    [plan] = of_type(out, "recovery_planned")
    assert plan.nodes == ("n1", "n3", "n4")
    restarted = [c for c in of_type(out, "command") if c.action == "restart"]
    assert {c.node: c.worker.ranks for c in restarted} == {"n1": (0, 1), "n3": (2, 3), "n4": (4, 5)}
    for command in restarted:
        source = command.worker.restore
        assert (source.kind, source.node) == ("replica", command.node)
        assert {(o.step, o.named) for o in replica_offers(tmp_path, command)} == {(STEP, True)}


def test_a_newcomer_restores_from_a_survivor_s_snapshots(tmp_path) -> None:
    rec = Recorder()
    ran = started(rec, ("n1", "n2", "n3"))
    write_snapshots(tmp_path, ran)

    out = rec.feed(incident("xid", "SEV1", node="n1"), now=100.0)
    commands = {c.node: c for c in of_type(out, "command")}
    [plan] = of_type(out, "recovery_planned")
    joined = [n for n in plan.nodes if n not in plan.previous]
    assert joined, "the plan should bring in a spare"
    for node in joined:
        source = commands[node].worker.restore
        assert source.kind == "replica" and source.node in set(plan.nodes) & set(ran)
        assert replica_offers(tmp_path, commands[node]) == []  # it has none: a survivor's is chosen
    for node in set(plan.nodes) & set(plan.previous):  # each survivor offers its own snapshot
        assert {o.step for o in replica_offers(tmp_path, commands[node])} == {STEP}
