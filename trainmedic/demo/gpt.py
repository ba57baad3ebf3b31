"""The demo's second job: a small GPT-style transformer trained with HSDP (`--model gpt-hsdp`) on data
the same whatever the world size, so every run's losses equal an uninterrupted run's
(`reference_losses`; docs/demo.md, docs/executor.md "Sharded state (FSDP2, HSDP)").
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F  # noqa: N812 -- torch's own convention
from torch import nn

VOCAB, CONTEXT, WIDTH, HEADS, LAYERS = 64, 16, 32, 4, 2
BATCH = 48  # rows per step: whole shares for 1, 2, 3, 4, 6, 8, 12 or 16 ranks
LR = 3e-3


class Block(nn.Module):
    """Pre-norm causal self-attention and an MLP, each with a residual."""

    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.out = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows, length, _ = x.shape
        q, k, v = (t.view(rows, length, HEADS, WIDTH // HEADS).transpose(1, 2)
                   for t in self.qkv(self.norm1(x)).chunk(3, dim=-1))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(attended.transpose(1, 2).reshape(rows, length, WIDTH))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(VOCAB, WIDTH), nn.Embedding(CONTEXT, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm, self.head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tokens(tokens) + self.positions(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def model() -> GPT:
    """The same initial weights in every process (before any sharding)."""
    torch.manual_seed(0)
    return GPT()


def shard(net: GPT, mesh) -> GPT:
    """HSDP on a 2-D mesh (replicate, shard); FSDP on a 1-D one: each block, then the rest."""
    from torch.distributed.fsdp import fully_shard

    for block in net.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(net, mesh=mesh)
    return net


def optimizer(net: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(net.parameters(), lr=LR, fused=True)


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step `step`'s global batch (inputs, next-token targets), the same in every run and whatever
    the world size. Its tokens follow a rule the model can learn (each token is 5 x the previous
    + 3, mod the vocabulary, with one token in ten random), so the loss visibly falls."""
    gen = torch.Generator().manual_seed(1000 + step)
    rows = [torch.randint(VOCAB, (BATCH,), generator=gen)]
    for _ in range(CONTEXT):
        rule = (rows[-1] * 5 + 3) % VOCAB
        noise = torch.rand(BATCH, generator=gen) < 0.1
        rows.append(torch.where(noise, torch.randint(VOCAB, (BATCH,), generator=gen), rule))
    tokens = torch.stack(rows, dim=1)
    return tokens[:, :-1], tokens[:, 1:]


def loss(net: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(net(inputs).flatten(0, 1), targets.flatten())


def share(step: int, rank: int, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's rows of step `step`'s batch (every rank of an HSDP job is data parallel)."""
    if BATCH % world_size:
        raise ValueError(f"the gpt-hsdp demo's batch of {BATCH} rows does not split over {world_size} ranks")
    inputs, targets = batch(step)
    return inputs[rank::world_size], targets[rank::world_size]


def reference_losses(until: int) -> Iterator[float]:
    """The loss of every step from 0 to `until` of an uninterrupted run in one process."""
    net = model()
    opt = optimizer(net)
    for step in range(until):
        value = loss(net, *batch(step))
        value.backward()
        opt.step()
        opt.zero_grad()
        yield value.item()
