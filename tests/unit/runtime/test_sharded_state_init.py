"""A fresh optimizer's state for a sharded restore (`sharded.init_state`), against DCP's own (a step at
lr 0 on the DTensors): the same keys and layouts without stepping the optimizer (and, for these
optimizers' settings, the same fresh values); then the saved values landing in place
(`sharded.load_restored`) as DCP's `set_state_dict` would load them. The mesh is
4 x 2 with rank 3's view of it, on torch's fake process group (one process, no collective runs), so
that shards are uneven as on a real HSDP job."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.testing._internal.distributed.fake_pg import FakeStore

from trainmedic.runtime import sharded

OPTIMIZERS: dict[str, Callable] = {
    "AdamW fused": lambda ps: torch.optim.AdamW(ps, lr=0.1, fused=True),
    "AdamW": lambda ps: torch.optim.AdamW(ps, lr=0.1),
    "Adam amsgrad": lambda ps: torch.optim.Adam(ps, lr=0.1, amsgrad=True),
    "SGD momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "RMSprop centered": lambda ps: torch.optim.RMSprop(ps, momentum=0.5, centered=True),
    "Adagrad": lambda ps: torch.optim.Adagrad(ps),  # has state from the start: left as it is
}


@pytest.fixture
def mesh():
    dist.init_process_group("fake", rank=3, world_size=8, store=FakeStore())
    yield init_device_mesh("cpu", (4, 2), mesh_dim_names=("replicate", "shard"))
    dist.destroy_process_group()


def sharded_net(mesh) -> torch.nn.Module:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.LayerNorm(7), torch.nn.Linear(7, 3))
    return fully_shard(net, mesh=mesh)


def steps_taken(optimizer: torch.optim.Optimizer) -> list[int]:
    taken: list[int] = []
    optimizer.register_step_pre_hook(lambda *_: taken.append(1))
    return taken


def assert_same_state(ours: dict, dcps: dict) -> None:
    assert ours.keys() == dcps.keys()
    for key, want in dcps.items():
        got = ours[key]
        assert type(got) is type(want), key
        if isinstance(want, DTensor):
            assert (got.placements, got.shape, got.stride(), got.dtype) == \
                (want.placements, want.shape, want.stride(), want.dtype), key
            got, want = got.to_local(), want.to_local()
        if isinstance(want, torch.Tensor):
            assert (got.shape, got.dtype, got.device) == (want.shape, want.dtype, want.device), key
            assert torch.equal(got, want), key
        else:
            assert got == want, key


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_a_fresh_optimizer_gets_dcp_s_state_without_a_step(mesh, name: str) -> None:
    theirs = sharded_net(mesh)
    dcp_optimizer = OPTIMIZERS[name](theirs.parameters())
    _, dcps = get_state_dict(theirs, dcp_optimizer, options=sharded.OPTIONS)
    ours = sharded_net(mesh)
    optimizer = OPTIMIZERS[name](ours.parameters())
    taken = steps_taken(optimizer)
    sharded.init_state(optimizer)
    state = sharded.flat_state(ours, optimizer)
    assert taken == []
    assert_same_state({k.removeprefix("optim/"): v for k, v in state.items() if k.startswith("optim/")}, dcps)
    assert all(p.grad is None for p in ours.parameters())


class PerParameter(torch.optim.Optimizer):
    """A toy optimizer: `keep(state, p)` is what it keeps of parameter `p`. Each below is named as
    torch.optim's own (a class's `__module__` is its own, not inherited), so that the layout checks
    say no, not the class check."""

    def __init__(self, params, lr: float = 0.1) -> None:
        super().__init__(params, {"lr": lr})

    def step(self, closure=None) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                self.keep(self.state[p], p)


class Factored(PerParameter):
    """A state tensor shaped as no shard (a row of sums, as Adafactor keeps): the stand-ins cannot
    say how it is laid out."""

    __module__ = "torch.optim.toy"

    @staticmethod
    def keep(state: dict, p: torch.Tensor) -> None:
        state.setdefault("row", torch.zeros_like(p.sum(0))).add_(p.grad.sum(0))


class Nested(PerParameter):
    """State nested a level down (as Shampoo keeps it): the stand-ins would lay out only the top."""

    __module__ = "torch.optim.toy"

    @staticmethod
    def keep(state: dict, p: torch.Tensor) -> None:
        state.setdefault("preconditioner", {"sum": torch.zeros_like(p)})["sum"].add_(p.grad)


class WithAverage(torch.optim.AdamW):
    """A subclass with a setting its param groups do not hold: built again over stand-ins it would
    step without it, and its state would lack the average."""

    def __init__(self, params, average: bool = False, **settings) -> None:
        super().__init__(params, **settings)
        self.average = average

    def step(self, closure=None) -> None:
        super().step(closure)
        if self.average:
            for group in self.param_groups:
                for p in group["params"]:
                    self.state[p].setdefault("average", torch.zeros_like(p)).lerp_(p.detach(), 0.1)


@pytest.mark.parametrize("make", [Factored, Nested, lambda ps: WithAverage(ps, average=True, lr=0.1)],
                         ids=["factored", "nested", "subclass"])
def test_what_stand_ins_cannot_lay_out_is_left_to_dcp_s_step(mesh, make: Callable) -> None:
    net = sharded_net(mesh)
    optimizer = make(net.parameters())
    assert sharded.init_state(optimizer) is False
    assert not optimizer.state
    taken = steps_taken(optimizer)
    state = sharded.flat_state(net, optimizer)
    assert taken  # DCP's step (a subclass's step runs the hooks again in its super's)
    assert any(k.startswith("optim/state.") for k in state)
    if isinstance(optimizer, WithAverage):
        assert "optim/state.0.weight.average" in state


def saved(mesh, lr: float) -> dict:
    """A flat state as a snapshot holds it: each DTensor's local values, plain values as they are."""
    net = sharded_net(mesh)
    optimizer = OPTIMIZERS["AdamW fused"](net.parameters())
    state = sharded.flat_state(net, optimizer)
    for number, value in enumerate(state.values()):
        if isinstance(value, torch.Tensor):
            local = value.to_local() if isinstance(value, DTensor) else value
            local.copy_(torch.arange(local.numel()).view(local.shape) * 0.01 + number)
    optimizer.param_groups[0]["lr"] = lr  # as a scheduler moves it
    return {key: value.to_local().clone() if isinstance(value, DTensor) else
            value.clone() if isinstance(value, torch.Tensor) else value
            for key, value in sharded.flat_state(net, optimizer).items()}


def restored(mesh, snapshot: dict, finish: Callable,
             copies: bool = False) -> tuple[torch.nn.Module, torch.optim.Optimizer, list]:
    """A fresh rank's model and optimizer with `snapshot` copied in as a restore copies it, then
    `finish`ed; and the optimizer's load_state_dict calls. `copies`: its state_dict gives copies."""
    net = sharded_net(mesh)
    optimizer = OPTIMIZERS["AdamW fused"](net.parameters())
    loads: list[int] = []
    optimizer.register_load_state_dict_post_hook(lambda *_: loads.append(1))
    if copies:
        optimizer.register_state_dict_post_hook(lambda _, saved: copy.deepcopy(saved))
    sharded.init_state(optimizer)
    state = sharded.flat_state(net, optimizer)
    for key, value in state.items():
        if isinstance(value, DTensor):
            value.to_local().copy_(snapshot[key])
    plain = {key: value for key, value in snapshot.items() if not isinstance(state[key], DTensor)}
    finish(net, optimizer, state, sharded.apply_plain(state, plain))
    return net, optimizer, loads


def assert_same_training_state(one: tuple, other: tuple) -> None:
    for name, got in one[0].state_dict().items():
        assert torch.equal(got.to_local(), other[0].state_dict()[name].to_local()), name
    ours, dcps = one[1].state_dict(), other[1].state_dict()
    assert ours["param_groups"] == dcps["param_groups"]
    for index, values in dcps["state"].items():
        for key, want in values.items():
            got = ours["state"][index][key]
            assert type(got) is type(want) and torch.equal(
                got.to_local() if isinstance(got, DTensor) else got,
                want.to_local() if isinstance(want, DTensor) else want), (index, key)


def test_a_restore_from_snapshots_lands_in_place_as_dcp_would_load_it(mesh) -> None:
    snapshot = saved(mesh, lr=0.0123)
    ours = restored(mesh, snapshot, sharded.load_restored)
    dcps = restored(mesh, snapshot, lambda net, optimizer, state, _: sharded.load_flat(net, optimizer, state))
    assert ours[2] == [] and dcps[2] == [1]
    assert ours[1].param_groups[0]["lr"] == 0.0123
    assert_same_training_state(ours, dcps)
    assert all(torch.equal(ours[0].state_dict()[name].to_local(), snapshot[f"model/{name}"])
               for name in ours[0].state_dict())


def test_a_hyper_parameter_its_group_disagrees_on_is_left_to_dcp(mesh) -> None:
    snapshot = saved(mesh, lr=0.0123)
    snapshot["optim/param_groups.0.bias.lr"] = 0.5  # one group, two lrs: which is meant is DCP's call
    ours = restored(mesh, snapshot, sharded.load_restored)
    dcps = restored(mesh, snapshot, lambda net, optimizer, state, _: sharded.load_flat(net, optimizer, state))
    assert ours[2] == [1]
    assert_same_training_state(ours, dcps)


def test_a_state_dict_that_gives_copies_is_loaded_by_dcp(mesh) -> None:
    snapshot = saved(mesh, lr=0.0123)
    ours = restored(mesh, snapshot, sharded.load_restored, copies=True)
    dcps = restored(mesh, snapshot, lambda net, optimizer, state, _: sharded.load_flat(net, optimizer, state),
                    copies=True)
    assert ours[2] == [1]
    assert_same_training_state(ours, dcps)
    step = next(iter(ours[1].state.values()))["step"]
    assert step == snapshot["optim/state.0.weight.step"]
