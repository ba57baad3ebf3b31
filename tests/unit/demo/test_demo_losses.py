"""The gpt-hsdp demo's job and its loss check, in one process."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from trainmedic.demo import gpt
from trainmedic.demo.losses import TOLERANCE, compare, logged


def test_rank_0_s_losses_are_read_per_generation_and_step(tmp_path: Path) -> None:
    (tmp_path / "g0-rank0.log").write_text(
        "restored step 0 from nothing gen 0 rank 0 t 1.0\n"
        "step 0 loss 4.248820 gen 0 rank 0 t 1.1\nstep 1 loss 4.1 gen 0 rank 0 t 1.2\n"
        "INFO some log line mentioning step 7 loss 9.0 gen 0 rank 0\n")
    (tmp_path / "g1-rank0.log").write_text("step 1 loss 4.100001 gen 1 rank 0 t 2.0\n")
    (tmp_path / "g1-rank1.log").write_text("step 1 loss 5.0 gen 1 rank 1 t 2.0\n")  # not rank 0: not read
    assert logged([tmp_path / "g0-rank0.log", tmp_path / "g1-rank0.log"]) == {
        (0, 0): 4.24882, (0, 1): 4.1, (1, 1): 4.100001}


def test_the_check_finds_the_worst_step_and_refuses_what_it_cannot_compare() -> None:
    reference = [4.0, 3.0, 2.0]
    good = compare({(0, 0): 4.0, (0, 1): 3.00001, (1, 1): 3.0, (1, 2): 2.00002}, reference)
    assert (good.steps, good.generations, good.worst_step, good.matches) == (4, 2, 2, True)
    assert math.isclose(good.max_abs_diff, 2e-5, rel_tol=1e-3)
    bad = compare({(0, 0): 4.0, (1, 1): 3.0 + 10 * TOLERANCE}, reference)
    assert (bad.worst_step, bad.matches) == (1, False)
    assert "DO NOT MATCH" in bad.describe()
    assert not compare({(0, 5): 1.0}, reference).matches  # past the reference
    assert not compare({}, reference).matches  # nothing logged is no evidence
    diverged = compare({(0, 0): 4.0, (0, 1): math.nan, (0, 2): 2.0}, reference)  # a nan never compares
    assert (diverged.max_abs_diff, diverged.worst_step, diverged.matches) == (math.inf, 1, False)
    unheard = compare({(0, 0): 4.0, (2, 1): 3.0}, reference, stepped={0, 1, 2})
    assert (unheard.silent, unheard.matches) == ((1,), False)
    assert "no loss logged by generation 1" in unheard.describe()


def test_a_diverged_rank_s_nan_is_read_not_skipped(tmp_path: Path) -> None:
    (tmp_path / "g3-rank0.log").write_text("step 9 loss nan gen 3 rank 0 t 1.0\n")
    assert math.isnan(logged([tmp_path / "g3-rank0.log"])[3, 9])


def test_every_rank_s_share_makes_the_same_global_batch_at_any_world_size() -> None:
    inputs, targets = gpt.batch(3)
    assert inputs.shape == targets.shape == (gpt.BATCH, gpt.CONTEXT)
    assert torch.equal(inputs[:, 1:], targets[:, :-1])  # next-token targets
    assert torch.equal(gpt.batch(3)[0], inputs) and not torch.equal(gpt.batch(4)[0], inputs)
    for world in (4, 6, 8):
        shares = [gpt.share(3, rank, world)[0] for rank in range(world)]
        assert sorted(map(tuple, torch.cat(shares).tolist())) == sorted(map(tuple, inputs.tolist()))
    with pytest.raises(ValueError, match="does not split over 5 ranks"):
        gpt.share(3, 0, 5)


def test_the_mean_of_the_shares_losses_is_the_whole_batch_s_loss_and_it_falls() -> None:
    net = gpt.model()
    whole = gpt.loss(net, *gpt.batch(0)).item()
    shares = [gpt.loss(net, *gpt.share(0, rank, 6)).item() for rank in range(6)]
    assert math.isclose(sum(shares) / 6, whole, rel_tol=1e-5)
    losses = list(gpt.reference_losses(60))
    assert losses[0] == pytest.approx(whole) and losses[-1] < losses[0] - 1.0


def test_the_gpt_hsdp_demo_s_nodes_tell_their_warm_launchers_to_preload_fsdp(tmp_path: Path,
                                                                             monkeypatch) -> None:
    from trainmedic.demo.cluster import DemoLayout
    from trainmedic.demo.runner import GPT_PRELOAD
    from trainmedic.local.cluster import LocalCluster
    from trainmedic.recovery.executor.forkserver import PRELOAD_ENV

    nodes = ("node-0", "node-1")
    monkeypatch.setenv(PRELOAD_ENV, "mylib")  # what the user preloads stays
    plain = LocalCluster(DemoLayout(tmp_path), "127.0.0.1:9092", "demo-abcdef.", nodes)
    assert plain.env()[PRELOAD_ENV] == "mylib"
    hsdp = LocalCluster(DemoLayout(tmp_path), "127.0.0.1:9092", "demo-abcdef.", nodes,
                        warm_preload=GPT_PRELOAD)
    assert hsdp.env()[PRELOAD_ENV].split(",") == ["mylib", *GPT_PRELOAD]


@pytest.mark.parametrize("world", [1, 5, 6, 8])
def test_the_mlp_s_shares_summed_are_the_whole_batch_s_loss_and_gradient_at_any_world_size(world) -> None:
    """What the mlp demo's ranks all-reduce (their summed losses and gradients, over BATCH) is the
    whole batch's mean loss and gradient, even shares or not: a re-plan to another world size trains
    on as an uninterrupted run does."""
    from trainmedic.demo import mlp

    net = mlp.model()
    whole = mlp.summed_loss(net, *mlp.batch(0)) / mlp.BATCH
    expected = torch.autograd.grad(whole, list(net.parameters()))
    total, grads = 0.0, [torch.zeros_like(p) for p in net.parameters()]
    for rank in range(world):
        share = mlp.summed_loss(net, *mlp.share(0, rank, world))
        total += share.item()
        parts = torch.autograd.grad(share, list(net.parameters()))
        grads = [g + d for g, d in zip(grads, parts, strict=True)]
    assert sum(mlp.share(0, rank, world)[0].shape[0] for rank in range(world)) == mlp.BATCH
    assert math.isclose(total / mlp.BATCH, whole.item(), rel_tol=1e-5)
    assert all(torch.allclose(g / mlp.BATCH, e, atol=1e-6) for g, e in zip(grads, expected, strict=True))
    losses = list(mlp.reference_losses(60))
    assert losses[0] == pytest.approx(whole.item()) and losses[-1] < losses[0] / 2
