"""The demo's first job: a small MLP trained data parallel (`--model mlp`, the default) on one batch per
step that the ranks share whatever their number, so every run's losses equal an uninterrupted run's
(`reference_losses`; docs/demo.md).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

FEATURES, HIDDEN = 16, 32
BATCH = 48  # rows per step, shared by however many ranks there are (up to 48)
LR = 0.01


def model(hidden: int = HIDDEN) -> torch.nn.Sequential:
    """The same initial weights in every process."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))


class Momentum:
    """SGD with momentum, by hand. torch.optim's constructor imports torch._dynamo, which takes
    seconds on a small CPU and would dominate the demo's restart time."""

    def __init__(self, params: list[torch.nn.Parameter], lr: float = LR, beta: float = 0.9) -> None:
        self.params, self.lr, self.beta = params, lr, beta
        self.velocity = [torch.zeros_like(p) for p in params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for p, v in zip(self.params, self.velocity, strict=True):
            v.mul_(self.beta).add_(p.grad)
            p.sub_(self.lr * v)

    def state_dict(self) -> dict:
        return {"lr": self.lr, "beta": self.beta, "velocity": [v.clone() for v in self.velocity]}

    def load_state_dict(self, state: dict) -> None:
        self.lr, self.beta = state["lr"], state["beta"]
        for v, saved in zip(self.velocity, state["velocity"], strict=True):
            v.copy_(saved)


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step `step`'s whole batch (inputs, targets of a fixed linear rule), the same in every run."""
    x = torch.randn(BATCH, FEATURES, generator=torch.Generator().manual_seed(1000 + step))
    weights = torch.randn(FEATURES, 1, generator=torch.Generator().manual_seed(7))
    return x, x @ weights


def share(step: int, rank: int, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's rows of step `step`'s batch: contiguous, as even as `BATCH` allows."""
    if world_size > BATCH:
        raise ValueError(f"the mlp demo's batch of {BATCH} rows cannot be shared by {world_size} ranks")
    x, y = batch(step)
    return x.tensor_split(world_size)[rank], y.tensor_split(world_size)[rank]


def summed_loss(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The squared error summed over the rows: the ranks' sums add up to the whole batch's, whatever
    the shares (the loss of a step is this over `BATCH`)."""
    return torch.nn.functional.mse_loss(net(x), y, reduction="sum")


def reference_losses(until: int, hidden: int = HIDDEN) -> Iterator[float]:
    """The loss of every step from 0 to `until` of an uninterrupted run in one process."""
    net = model(hidden)
    optimizer = Momentum(list(net.parameters()))
    for step in range(until):
        optimizer.zero_grad()
        value = summed_loss(net, *batch(step)) / BATCH
        value.backward()
        optimizer.step()
        yield value.item()
