"""Sharded training state (FSDP2's `fully_shard`, HSDP): snapshots per shard, restore per shard from the
nearest copy onto a mesh of any size, else from a DCP checkpoint (docs/executor.md, "Sharded state
(FSDP2, HSDP)").
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

from trainmedic.runtime import rank_state, resume, state_files
from trainmedic.runtime.env import WorkerEnv
from trainmedic.runtime.shard_plan import Box, Need, ShardFile, Transfer, plan, restorable
from trainmedic.runtime.snapshot_writer import SnapshotWriter

log = logging.getLogger(__name__)

OPTIONS = StateDictOptions(flatten_optimizer_state_dict=True)
SHARDS = "shards"  # the prefix of shard snapshot files, named as `state_files` names states
CHUNK = 8 << 20  # bytes per host buffer of a snapshot (see _pack)


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether `model`'s parameters are DTensors (FSDP2 / HSDP), not whole tensors on every rank."""
    return any(isinstance(p, DTensor) for p in model.parameters())


def flat_state(model: torch.nn.Module, optimizer: Any) -> dict[str, Any]:
    """Model and optimizer state as one flat dict (`model/<fqn>`, `optim/<key>`). Sharded tensors
    are DTensors; an optimizer that has not stepped gets its state initialised (by DCP, unless
    `init_state` gave it)."""
    model_sd, optim_sd = get_state_dict(model, optimizer, options=OPTIONS)
    return {**{f"model/{k}": v for k, v in model_sd.items()},
            **{f"optim/{k}": v for k, v in optim_sd.items()}}


def init_state(optimizer: Any) -> bool:
    """Give an optimizer that has not stepped its state, laid out as its parameters, without
    stepping it: an optimizer of torch.optim's own classes (whose settings are all in its param
    groups) is built again over stand-ins, plain tensors shaped as this
    rank's shards, and steps once at zero gradients; each state tensor shaped as its stand-in
    becomes a DTensor laid out as the parameter, a scalar (the step count) stays a tensor. DCP's
    own way, a step at lr 0 on the DTensors, costs a fresh process DTensor's sharding propagation
    for every operator and shape (most of an HSDP restore's template; docs/executor.md, "Where an
    HSDP restore's seconds go"); the stand-ins cost, for a moment, one more copy of the rank's
    shards. False, and no state, for any other optimizer (a subclass may keep a setting outside
    its param groups, and be built again without it), where the stand-ins cannot tell the layout
    (nested state, a 0-d parameter) or it cannot step without a closure: DCP's step gives it then.
    An optimizer that has state (it stepped, or keeps state from the start as Adagrad does) is left
    as it is."""
    if optimizer.state or not type(optimizer).__module__.startswith("torch.optim."):
        return False
    groups = optimizer.param_groups
    params = [p for group in groups for p in group["params"]]
    local = {p: _local(p) for p in params}
    if any(t.dim() == 0 for t in local.values()):
        return False
    stand_in = {p: torch.zeros_like(t) for p, t in local.items()}
    try:
        shadow = type(optimizer)([{**group, "params": [stand_in[p] for p in group["params"]]}
                                  for group in groups])
        for p, t in stand_in.items():
            if p.requires_grad:
                t.grad = torch.zeros_like(t)
        shadow.step()
    except Exception as err:  # LBFGS wants a closure, SparseAdam sparse gradients: DCP's step fails alike
        log.info("%s could not step over stand-ins (%s: %s); its state comes from DCP's step at lr 0",
                 type(optimizer).__name__, type(err).__name__, err)
        return False
    state = {}
    for p in params:
        if stand_in[p] not in shadow.state:
            continue
        values = shadow.state[stand_in[p]]
        shape = stand_in[p].shape
        if any(not isinstance(v, torch.Tensor | int | float | None) or isinstance(v, torch.Tensor)
               and v.dim() and v.shape != shape for v in values.values()):
            return False
        state[p] = {k: _laid_out_as(p, v) if isinstance(v, torch.Tensor) and v.dim() else v
                    for k, v in values.items()}
    optimizer.state.update(state)
    return bool(state)


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def _laid_out_as(param: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
    if not isinstance(param, DTensor):
        return local
    return DTensor.from_local(local, param.device_mesh, param.placements, run_check=False,
                              shape=param.shape, stride=param.stride())


def load_flat(model: torch.nn.Module, optimizer: Any, state: dict[str, Any]) -> None:
    model_sd = {k.removeprefix("model/"): v for k, v in state.items() if k.startswith("model/")}
    optim_sd = {k.removeprefix("optim/"): v for k, v in state.items() if k.startswith("optim/")}
    set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd, options=OPTIONS)


def box_of(tensor: DTensor) -> Box:
    """The box of `tensor` this rank holds. Only FSDP2's placements cut a tensor into one box per
    rank; tensor parallelism's strided shards do not."""
    mesh = tensor.device_mesh
    return _box(tuple(tensor.shape), mesh, tuple(mesh.get_coordinate() or ()), tuple(tensor.placements))


# The same few layouts at every snapshot: computed once each. Meshes compare equal whatever the
# rank, so the rank's coordinate is part of the key.
@functools.lru_cache(maxsize=1024)
def _box(shape: tuple[int, ...], mesh: Any, coordinate: tuple[int, ...], placements: tuple[Any, ...]) -> Box:
    if any(type(p) not in (Shard, Replicate) for p in placements):
        raise NotImplementedError(f"sharded restore supports FSDP2 / HSDP placements (Shard, Replicate), "
                                  f"not {placements}")
    sizes, offsets = compute_local_shape_and_global_offset(shape, mesh, placements)
    return tuple(offsets), tuple(sizes)


def _pack(tensors: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, tuple]]:
    """`tensors` copied to host memory into flat buffers of one dtype each, with where each lies
    (key -> buffer, offset, shape): a snapshot pickles a few buffers and an index, not a hundred
    tensors (which took most of a small model's snapshot time). A buffer holds up to `CHUNK`
    bytes (a bigger tensor has one of its own): the allocator reuses freed blocks that size,
    while one fresh buffer of a whole large state would pay its page faults at every snapshot."""
    buffers: dict[str, torch.Tensor] = {}
    index: dict[str, tuple] = {}
    keys_of: dict[torch.dtype, list[str]] = {}
    for key, tensor in tensors.items():
        keys_of.setdefault(tensor.dtype, []).append(key)
    for dtype, keys in keys_of.items():
        per_chunk = max(1, CHUNK // dtype.itemsize)
        groups: list[list[str]] = [[]]
        filled = 0
        for key in keys:
            if groups[-1] and filled + tensors[key].numel() > per_chunk:
                groups.append([])
                filled = 0
            groups[-1].append(key)
            filled += tensors[key].numel()
        for number, group in enumerate(groups):
            name = f"{str(dtype).removeprefix('torch.')}-{number}"
            buffer = buffers[name] = torch.empty(sum(tensors[k].numel() for k in group), dtype=dtype)
            at = 0
            for key in group:
                tensor = tensors[key]
                buffer[at:at + tensor.numel()].view(tensor.shape).copy_(tensor)
                index[key] = (name, at, tuple(tensor.shape))
                at += tensor.numel()
    return buffers, index


def _unpack(buffers: dict[str, torch.Tensor], index: dict[str, tuple]) -> dict[str, torch.Tensor]:
    return {key: buffers[name][at:at + math.prod(shape)].view(shape)
            for key, (name, at, shape) in index.items()}


def _read(path: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """A snapshot's shards (key -> this rank's local tensor) and its unsharded values, mapped from
    disk (a shard is read when it is sliced). The unsharded tensors are copied out of the shared
    buffer: pickled, a view would carry the whole buffer with it."""
    payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    tensors = _unpack(payload["buffers"], payload["index"])
    shards = {key: tensors[key] for key in payload["boxes"]}
    plain = {**payload["values"], **{k: v.clone() for k, v in tensors.items() if k not in payload["boxes"]}}
    return shards, plain


def snapshot(directory: Path, rank: int, step: int, generation: int, state: dict[str, Any],
             writer: SnapshotWriter | None = None, own: dict[str, Any] | None = None) -> Path:
    """Write this rank's shards of `state` (from `flat_state`) and what is its `own` (RNG streams,
    data position: `rank_state.capture`) after `step` steps, keeping this
    rank's newest `state_files.SNAPSHOTS_KEPT` by (generation, step): a generation that went back
    to an older step is the job's timeline now, and the one it left is what goes. The shards
    are copied to host memory here; with `writer` the file is written behind the caller (once the
    previous write is done: one copy in host memory), and one more snapshot is kept: a rank
    stopped with its write in flight may be two saved steps behind the others, not one."""
    if writer is not None:
        writer.wait()
    boxes = {key: box_of(value) for key, value in state.items() if isinstance(value, DTensor)}
    buffers, index = _pack({key: value.to_local().detach() if key in boxes else value.detach()
                            for key, value in state.items() if isinstance(value, torch.Tensor)})
    values = {key: value for key, value in state.items() if not isinstance(value, torch.Tensor)}
    payload = {"step": step, "generation": generation, "boxes": boxes, "buffers": buffers, "index": index,
               "values": values, "own": own}
    kept = state_files.SNAPSHOTS_KEPT + (writer is not None)

    def write() -> None:
        state_files.save_snapshot(directory, _prefix(rank), generation, step, payload, kept)

    if writer is None:
        write()
    else:
        writer.submit(write)
    return state_files.state_path(directory, _prefix(rank), generation, step)


def _prefix(rank: int | None) -> str:
    """File-name prefix of one rank's shard snapshots (`shards<r>-g<G>-step<N>.pt`), or of any's."""
    return SHARDS if rank is None else f"{SHARDS}{rank}-"


def node_files(env: WorkerEnv) -> list[ShardFile]:
    """The shard snapshots in this node's snapshot dir (any rank's, any generation's): their boxes
    only, the tensors are not read."""
    if not env.snapshot_dir:
        return []
    found = []
    for _, step, path in state_files.list_states(Path(env.snapshot_dir), _prefix(None)):
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except Exception as err:  # a torn or foreign file is not a copy to restore from
            log.warning("rank %d: snapshot %s unreadable (%s); not offered", env.rank, path, err)
            continue
        if "index" not in payload:  # written by an earlier trainmedic, before snapshots were packed
            log.warning("rank %d: snapshot %s is in an older format; not offered", env.rank, path)
            continue
        boxes = tuple(sorted((key, (tuple(b[0]), tuple(b[1]))) for key, b in payload["boxes"].items()))
        found.append(ShardFile(env.node, str(path), step, int(payload["generation"]), boxes))
    return found


@dataclass(frozen=True, slots=True)
class ShardRestore:
    """What a sharded restore did: `step` from `kind` ("replica": snapshots, "checkpoint": a DCP
    directory at `path`), for snapshots the elements this rank read from its own node's files
    and got sent from other nodes, and how long it took: `seconds` in all, of which `prepare_s`
    went to the state's template (`init_state`, `flat_state`: the same whatever the source; where
    DCP gives a fresh optimizer its state, it pays the optimizer's first step)."""

    step: int
    kind: str
    path: str = ""
    generation: int = state_files.UNNAMED  # that saved the snapshots (a DCP checkpoint's is not known)
    read: int = 0
    received: int = 0
    seconds: float = 0.0
    prepare_s: float = 0.0
    own: dict[str, Any] | None = field(default=None, repr=False)  # this rank number's RNG, data position
    resumed: bool = False  # a checkpoint of another submission, the one the job's `resume` names

    def report(self) -> dict[str, Any]:
        """The fields of `schemas.Restored` (shard counts only for snapshots)."""
        counts = {"read": self.read, "received": self.received} if self.kind == "replica" else {}
        return {"kind": self.kind, "step": self.step, "seconds": round(self.seconds, 3), **counts}

    def describe(self) -> str:
        where = (f"checkpoint {self.path}" if self.kind != "replica" else
                 f"snapshots per shard: {self.read} elements read on this node, {self.received} received "
                 f"from other nodes")
        return f"{where}, {self.seconds:.2f}s"


def restore(env: WorkerEnv, model: torch.nn.Module, optimizer: Any, device: torch.device | None = None,
            checkpoints: bool = True) -> ShardRestore | None:
    """Load the newest state the surviving snapshots (else, with `checkpoints`, this submission's
    newest checkpoint, else the one it resumed from) hold into `model` and `optimizer` on every
    rank, resharded to this mesh; None: nothing to restore, the optimizer as it was. A collective.
    Raises ResumeRefused when the job asked to resume and there is nothing to resume from, or the
    checkpoint is of another model or world size."""
    if env.restore.kind == "none":
        return None
    began = time.monotonic()
    stepped = bool(optimizer.state)
    init_state(optimizer)
    state = flat_state(model, optimizer)
    prepared = time.monotonic() - began
    sharded = {k: v for k, v in state.items() if isinstance(v, DTensor)}
    mine = [Need(env.rank, k, box_of(v), tuple(v.shape)) for k, v in sharded.items()]
    files = node_files(env)  # whatever the source names: the newest whole step wins
    offered = (_checkpoints(env), _resumable(env)) if checkpoints else ([], [])
    gathered: list[Any] = [None] * env.world_size
    dist.all_gather_object(gathered, (env.node, files, mine, *offered))
    node_of = {rank: g[0] for rank, g in enumerate(gathered)}
    every_file = sorted({f for g in gathered for f in g[1]}, key=lambda f: (f.node, f.path))
    needs = [n for g in gathered for n in g[2]]
    candidates = restorable(every_file, needs)
    if candidates:
        generation, step = candidates[0]
        chosen = [f for f in every_file if (f.step, f.generation) == (step, generation)]
        read, received = _copy(plan(chosen, needs, node_of), env.rank, sharded, device)
        replaced = _restore_plain(state, chosen, node_of, env.rank, device)
        load_restored(model, optimizer, state, replaced)
        own = None if not env.snapshot_dir else rank_state.read(
            state_files.state_path(Path(env.snapshot_dir), _prefix(env.rank), generation, step))
        return ShardRestore(step, "replica", generation=generation, read=read, received=received,
                            seconds=time.monotonic() - began, prepare_s=prepared, own=own)
    own_common = set.intersection(*(set(g[3]) for g in gathered))
    resumed_common = set.intersection(*(set(g[4]) for g in gathered))
    if not own_common and not resumed_common:
        if checkpoints and env.resume:
            resume.location(env)  # raises when that is why (`latest` found none)
            raise resume.ResumeRefused(f"resume from {env.resume}: no whole checkpoint every rank can "
                                       "read there; not resumed")
        if not stepped:
            optimizer.state.clear()  # what `flat_state` initialised goes
        return None
    step, path = max(own_common or resumed_common)
    if not own_common and (why := _resume_mismatch(path, state, env.world_size)):
        raise resume.refuse(path, why)
    dcp.load(state, checkpoint_id=path)
    load_flat(model, optimizer, state)
    return ShardRestore(step, "checkpoint", path=path, seconds=time.monotonic() - began, prepare_s=prepared,
                        resumed=not own_common)


def _resume_mismatch(path: str, state: dict[str, Any], world_size: int) -> str | None:
    """Why the DCP checkpoint at `path` is not of this model (its tensors' names and shapes) and
    world size (the note `checkpoint` writes beside it), or None."""
    saved = dcp.FileSystemReader(path).read_metadata().state_dict_metadata
    model = {key: tuple(meta.size) for key, meta in saved.items()
             if key.startswith("model/") and hasattr(meta, "size")}
    live = {key: tuple(value.shape) for key, value in state.items()
            if key.startswith("model/") and isinstance(value, torch.Tensor)}
    try:
        world = json.loads((Path(path) / resume.WORLD_FILE).read_text())["world_size"]
    except (OSError, ValueError, KeyError, TypeError):
        world = None
    return resume.mismatch(model, live, world, world_size)


def _copy(transfers: list[Transfer], rank: int, sharded: dict[str, DTensor],
          device: torch.device | None) -> tuple[int, int]:
    """Carry out this rank's part of `transfers`: reads, sends and receives (one batch)."""
    opened: dict[str, dict[str, torch.Tensor]] = {}

    def source(t: Transfer) -> torch.Tensor:
        if t.path not in opened:
            opened[t.path] = _read(t.path)[0]
        return opened[t.path][t.key][_slices(t.src_at, t.sizes)]

    ops, landed, read, received = [], [], 0, 0
    for t in transfers:
        if t.dst == rank:
            into = sharded[t.key].to_local()[_slices(t.dst_at, t.sizes)]
            if t.src == rank:
                into.copy_(source(t))
                read += t.numel
            else:
                buffer = torch.empty(t.sizes, dtype=into.dtype, device=into.device)
                ops.append(dist.P2POp(dist.irecv, buffer, t.src))
                landed.append((into, buffer))
                received += t.numel
        elif t.src == rank:
            ops.append(dist.P2POp(dist.isend, source(t).contiguous().to(device or "cpu"), t.dst))
    if ops:
        for work in dist.batch_isend_irecv(ops):
            work.wait()
    for into, buffer in landed:
        into.copy_(buffer)
    return read, received


def _restore_plain(state: dict[str, Any], files: list[ShardFile], node_of: dict[int, str],
                   rank: int, device: torch.device | None) -> dict[str, Any]:
    """The unsharded values (optimizer steps, hyper-parameters) in `files`, read by the lowest rank
    that can read one of them and given to every rank (small: no tensor of the model), put into
    `state` (`apply_plain`)."""
    owners = sorted((r, f.path) for f in files for r, n in node_of.items() if n == f.node)
    src, path = owners[0]
    box: list[Any] = [None]
    if rank == src:
        box[0] = _read(path)[1]
    dist.broadcast_object_list(box, src=src, device=device)
    return apply_plain(state, box[0])


def apply_plain(state: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """Copy `values` into `state`'s tensors of the same key; what has none (a hyper-parameter, a
    key the template lacks) replaces the entry, and is returned."""
    replaced = {}
    for key, value in values.items():
        if key in state and isinstance(state[key], torch.Tensor) and isinstance(value, torch.Tensor):
            state[key].copy_(value)
        else:
            state[key] = replaced[key] = value
    return replaced


def load_restored(model: torch.nn.Module, optimizer: Any, state: dict[str, Any],
                  replaced: dict[str, Any]) -> None:
    """Finish a restore whose tensors were copied into `state` (`flat_state`'s: the model's and the
    optimizer's own tensors, not copies), `replaced` the values that were not: each an optimizer
    hyper-parameter (`param_groups.<fqn>.<name>`, as a scheduler moves the lr) is set on its param
    group here. DCP's `set_state_dict` would copy every tensor onto itself, paying a fresh process
    DTensor's sharding propagation per shape for it (0.15-0.3 s of an HSDP demo rank's restore), and
    run the load hooks; it runs where a value has no such place, is a tensor, or a param group's
    parameters disagree on one, and where `state` holds a tensor that is not the live one (a
    `state_dict` override or hook that returns copies: the copies were restored, not the job)."""
    if not _live(model, optimizer, state):
        return load_flat(model, optimizer, state)
    fqn_of = {id(p): name for name, p in model.named_parameters()}
    settings: list[tuple[dict[str, Any], str, Any]] = []
    placed = set()
    for group in optimizer.param_groups:
        for name in group.keys() - {"params"}:
            keys = [f"optim/param_groups.{fqn_of.get(id(p))}.{name}" for p in group["params"]]
            values = [replaced[key] for key in keys if key in replaced]
            if not values:
                continue
            tensor = any(isinstance(value, torch.Tensor) for value in values)
            if tensor or len(values) < len(keys) or any(value != values[0] for value in values):
                return load_flat(model, optimizer, state)
            settings.append((group, name, values[0]))
            placed.update(keys)
    if placed != replaced.keys():
        return load_flat(model, optimizer, state)
    for group, name, value in settings:
        group[name] = value


def _live(model: torch.nn.Module, optimizer: Any, state: dict[str, Any]) -> bool:
    """Whether every tensor of `state` is one the model or the optimizer holds (the same memory)."""
    held = {_local(t).data_ptr() for t in (*model.parameters(), *model.buffers())}
    held |= {_local(v).data_ptr() for values in optimizer.state.values() for v in values.values()
             if isinstance(v, torch.Tensor)}
    return all(_local(v).data_ptr() in held or _local(v).numel() == 0
               for v in state.values() if isinstance(v, torch.Tensor))


def _slices(at: tuple[int, ...], sizes: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(a, a + n) for a, n in zip(at, sizes, strict=True))


def checkpoint(directory: Path, step: int, generation: int, state: dict[str, Any]) -> Path:
    """Save every rank's shards of `state` to `directory/step<N>` with DCP (a collective; the
    directory is shared storage) and keep the newest `state_files.CHECKPOINTS_KEPT`. DCP writes
    into a directory of its own, renamed into place once whole, so a save that dies half way
    never leaves a `step<N>` with another save's metadata."""
    path = directory / f"step{step:09d}"
    writing = directory / f"{path.name}.tmp-g{generation}"
    dcp.save(state, checkpoint_id=str(writing))
    if dist.get_rank() == 0:
        note = {"world_size": dist.get_world_size(), "step": step, "generation": generation}
        (writing / resume.WORLD_FILE).write_text(json.dumps(note) + "\n")  # what a resume checks
        shutil.rmtree(path, ignore_errors=True)  # the same step saved again, by a generation that went back
        os.replace(writing, path)
        for stale in directory.glob("step*.tmp-g*"):  # earlier generations' saves that died half way
            match = re.fullmatch(r"step\d+\.tmp-g(\d+)", stale.name)
            if match and int(match.group(1)) < generation:
                shutil.rmtree(stale, ignore_errors=True)
        for _, old in state_files.dcp_checkpoints(directory)[:-state_files.CHECKPOINTS_KEPT]:
            shutil.rmtree(old, ignore_errors=True)
    return path


def _checkpoints(env: WorkerEnv) -> list[tuple[int, str]]:
    """This submission's whole DCP checkpoints (its checkpoint dir)."""
    if not env.checkpoint_dir:
        return []
    return [(step, str(path)) for step, path in state_files.dcp_checkpoints(Path(env.checkpoint_dir))]


def _resumable(env: WorkerEnv) -> list[tuple[int, str]]:
    """The whole DCP checkpoints at the job's resume point (a checkpoint, or a directory of them);
    none when it has none, or `latest` finds none."""
    if not env.resume:
        return []
    try:
        where = resume.location(env)
    except resume.ResumeRefused as err:  # fatal only if nothing else is offered: `restore`
        log.warning("rank %d: %s", env.rank, err)
        return []
    if (where / state_files.DCP_METADATA).is_file():
        name = where.name.removeprefix("step")
        return [(int(name) if name.isdigit() else 0, str(where))]
    return [(step, str(path)) for step, path in state_files.dcp_checkpoints(where)]
