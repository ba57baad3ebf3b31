"""Sharded state (FSDP2, HSDP) survives a lost node: real ranks on gloo, real files, the runtime's
restore. Each run is a job generation; a node's snapshot dir removed is a node lost with its disk.
A restored run's losses must equal an uninterrupted run's (the same global batch at every step,
whatever the world size), which only the exact optimizer and model state gives."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch.multiprocessing as mp

from tests.integration.runtime import sharded_rank
from trainmedic.local.cluster import free_port


def generation(tmp_path: Path, name: str, nodes: list[str], **spec: Any) -> list[dict]:
    """Run one generation of the job to completion; what each rank reported."""
    out = tmp_path / name
    out.mkdir()
    spec = {"port": free_port(), "nodes": nodes, "root": str(tmp_path / "nodes"), "restore": "replica",
            "generation": 0, "replicas": 1, "out": str(out), **spec}
    mp.spawn(sharded_rank.run, args=(spec,), nprocs=len(nodes), join=True)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(len(nodes))]


def logs(tmp_path: Path, name: str) -> list[str]:
    return [p.read_text() for p in sorted((tmp_path / name).glob("rank*.log"))]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[int, float]:
    """The losses of steps 1..6 of a run that nothing interrupts (HSDP, 2 nodes x 2 ranks)."""
    ranks = generation(tmp_path_factory.mktemp("whole"), "run", ["a", "a", "b", "b"], replicas=2,
                       restore="none", until=6)
    return {int(step): loss for step, loss in ranks[0]["losses"].items()}


def losses(ranks: list[dict]) -> dict[int, float]:
    assert len({json.dumps(r["losses"]) for r in ranks}) == 1, "every rank reports the same mean loss"
    return {int(step): loss for step, loss in ranks[0]["losses"].items()}


def test_hsdp_restores_per_shard_from_the_surviving_replica_through_shrink_and_grow(
    tmp_path: Path, uninterrupted: dict[int, float],
) -> None:
    """HSDP shards within a node and replicates across nodes: node b lost after step 3, the job
    shrinks to node a (2 ranks, FSDP) with every shard read from a's own snapshots, then grows
    onto a new node c (4 ranks, HSDP) whose ranks receive their shards from node a's ranks. The
    first two generations write their snapshots behind the next step (`snapshot_async`)."""
    generation(tmp_path, "g0", ["a", "a", "b", "b"], replicas=2, restore="none", until=3, **{"async": True})
    shutil.rmtree(tmp_path / "nodes" / "b")

    shrunk = generation(tmp_path, "g1", ["a", "a"], until=4, generation=1, **{"async": True})
    assert {r["start"] for r in shrunk} == {3} and {r["kind"] for r in shrunk} == {"replica"}
    assert losses(shrunk) == pytest.approx({4: uninterrupted[4]}, rel=1e-5)
    assert all("received from other nodes" in log and " 0 received" in log for log in logs(tmp_path, "g1"))

    grown = generation(tmp_path, "g2", ["a", "a", "c", "c"], replicas=2, until=6, generation=2)
    assert {r["start"] for r in grown} == {4} and {r["warning"] for r in grown} == {None}
    assert losses(grown) == pytest.approx({5: uninterrupted[5], 6: uninterrupted[6]}, rel=1e-5)
    on_a, _, on_c, _ = logs(tmp_path, "g2")
    assert " 0 received" in on_a and " 0 elements read" in on_c and " 0 received" not in on_c
    # what the first step reports (worker_step.restored): node c's ranks received all they hold
    assert [(r["restored"]["kind"], r["restored"]["read"] > 0, r["restored"]["received"] > 0)
            for r in grown] == [("replica", True, False)] * 2 + [("replica", False, True)] * 2


def test_fsdp_without_a_replica_falls_back_to_the_checkpoint_loudly(
    tmp_path: Path, uninterrupted: dict[int, float],
) -> None:
    """Plain FSDP keeps one copy of each shard: with node b lost its shards are gone from the
    snapshots, so the restore takes the shared checkpoint (DCP, step 3) and says what was lost."""
    checkpoints = str(tmp_path / "shared")
    generation(tmp_path, "g0", ["a", "a", "b", "b"], restore="none", until=4, checkpoint_dir=checkpoints,
               every=3)
    shutil.rmtree(tmp_path / "nodes" / "b")

    ranks = generation(tmp_path, "g1", ["a", "a", "c", "c"], until=6, generation=1,
                       checkpoint_dir=checkpoints)
    assert {r["start"] for r in ranks} == {3} and {r["kind"] for r in ranks} == {"checkpoint"}
    assert all("restored step 3 from the checkpoint" in r["warning"] for r in ranks)
    assert {(r["restored"]["kind"], r["restored"]["step"], r["restored"].get("read")) for r in ranks} == {
        ("checkpoint", 3, None)}
    assert losses(ranks) == pytest.approx({s: uninterrupted[s] for s in (4, 5, 6)}, rel=1e-5)


def test_a_restart_in_place_reads_every_shard_from_its_own_node(
    tmp_path: Path, uninterrupted: dict[int, float],
) -> None:
    """A job's first start asks for its checkpoint and finds none: it starts fresh, with the
    optimizer as fresh as in a run that asked for nothing. Then the same mesh restarted: no
    shard crosses the network; and a step retried in place (`resync`, after the model was
    spoilt) takes every shard back from the last snapshot."""
    first = generation(tmp_path, "g0", ["a", "a", "b", "b"], replicas=2, restore="checkpoint", until=2,
                       checkpoint_dir=str(tmp_path / "shared"))
    assert {r["start"] for r in first} == {0}
    assert losses(first) == pytest.approx({1: uninterrupted[1], 2: uninterrupted[2]}, rel=1e-5)
    ranks = generation(tmp_path, "g1", ["a", "a", "b", "b"], replicas=2, until=4, generation=1, resync_at=3)
    assert {r["start"] for r in ranks} == {2}
    assert all(" 0 received from other nodes" in log for log in logs(tmp_path, "g1"))
    assert losses(ranks) == pytest.approx({3: uninterrupted[3], 4: uninterrupted[4]}, rel=1e-5)


def test_a_restart_in_place_continues_each_rank_s_random_stream_and_data_position(tmp_path: Path) -> None:
    """Each rank adds noise from its own torch stream and takes its batches from a sampler: after
    a restart on the same mesh the losses equal an uninterrupted run's only if every rank took
    back its own stream and position from its snapshot; onto another world size they are not
    taken, and the restore says so."""
    whole = generation(tmp_path, "whole", ["a", "a", "b", "b"], replicas=2, restore="none", until=4,
                       own=True, root=str(tmp_path / "whole-nodes"))
    generation(tmp_path, "g0", ["a", "a", "b", "b"], replicas=2, restore="none", until=2, own=True)
    ranks = generation(tmp_path, "g1", ["a", "a", "b", "b"], replicas=2, until=4, generation=1, own=True)
    assert {r["start"] for r in ranks} == {2}
    assert {r["own"] for r in ranks} == {"RNG and data position restored"}
    assert losses(ranks) == pytest.approx({s: losses(whole)[s] for s in (3, 4)}, rel=1e-5)
    shrunk = generation(tmp_path, "g2", ["a", "a"], until=5, generation=2, own=True)
    assert {r["own"] for r in shrunk} == {"RNG and data position not restored (saved at world size 4, now 2)"}


def test_a_new_submission_resumes_a_dcp_checkpoint_only_when_asked_and_only_onto_its_world(
    tmp_path: Path, uninterrupted: dict[int, float],
) -> None:
    """Submission 1 writes DCP checkpoints into its own directory of the shared checkpoint dir.
    Submission 2, without `resume`, never reads them (its own directory is empty); submission 3,
    with `resume: latest`, continues at submission 1's last step, its losses an uninterrupted run's;
    submission 4 asks the same on 2 ranks instead of 4, and is refused rather than trained on."""
    shared = tmp_path / "shared"

    def submission(number: int, nodes: list[str], **spec: Any) -> list[dict]:
        return generation(tmp_path, f"s{number}", nodes, root=str(tmp_path / f"s{number}-nodes"),
                          checkpoint_dir=str(shared / f"2026120{number}T000000.000Z-0000000{number}"),
                          every=1, **spec)

    submission(1, ["a", "a", "b", "b"], replicas=2, restore="none", until=3)
    fresh = submission(2, ["a", "a", "b", "b"], replicas=2, restore="checkpoint", until=0)
    assert {r["start"] for r in fresh} == {0} and {r["kind"] for r in fresh} == {None}
    resumed = submission(3, ["a", "a", "b", "b"], replicas=2, restore="checkpoint", until=5, resume="latest")
    assert {r["start"] for r in resumed} == {3} and {r["kind"] for r in resumed} == {"checkpoint"}
    assert losses(resumed) == pytest.approx({4: uninterrupted[4], 5: uninterrupted[5]}, rel=1e-5)
    with pytest.raises(Exception, match="written by 4 ranks and this job runs 2"):
        submission(4, ["a", "a"], restore="checkpoint", until=5,
                   resume=str(shared / "20261201T000000.000Z-00000001"))
