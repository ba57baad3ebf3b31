"""Where each piece of a sharded state comes from on restore: the newest step the surviving snapshot
files cover whole, each box from the nearest copy; pure planning, no torch (docs/executor.md,
"Sharded state (FSDP2, HSDP)").
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

Box = tuple[tuple[int, ...], tuple[int, ...]]  # (offsets, sizes)


@dataclass(frozen=True, slots=True)
class ShardFile:
    """One rank's snapshot as a node sees it: `path` on `node`, of `step` as the job's
    `generation` ran it; `boxes` per tensor key."""

    node: str
    path: str
    step: int
    generation: int
    boxes: tuple[tuple[str, Box], ...]


@dataclass(frozen=True, slots=True)
class Need:
    """The box of tensor `key` (global `shape`) that `rank` holds in the new mesh."""

    rank: int
    key: str
    box: Box
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Transfer:
    """Copy `sizes` elements from `path`'s chunk of `key` at `src_at` (offsets within that chunk),
    read by rank `src`, into rank `dst`'s local tensor of `key` at `dst_at`. `src == dst`: a read."""

    src: int
    dst: int
    path: str
    key: str
    src_at: tuple[int, ...]
    dst_at: tuple[int, ...]
    sizes: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.sizes)


def overlap(a: Box, b: Box) -> Box | None:
    """The box two boxes share (global offsets), or None."""
    starts = tuple(max(x, y) for x, y in zip(a[0], b[0], strict=True))
    ends = tuple(min(x + n, y + m) for x, n, y, m in zip(a[0], a[1], b[0], b[1], strict=True))
    if any(e <= s for s, e in zip(starts, ends, strict=True)):
        return None
    return starts, tuple(e - s for s, e in zip(starts, ends, strict=True))


def covers(boxes: Iterable[Box], shape: tuple[int, ...]) -> bool:
    """Whether the distinct `boxes`, the chunks of one layout (disjoint, as a sharding cuts),
    cover a tensor of `shape` whole. Chunks of different layouts never mix in one step."""
    distinct = {box for box in boxes if math.prod(box[1]) > 0}
    return sum(math.prod(box[1]) for box in distinct) == math.prod(shape)


def restorable(files: Iterable[ShardFile], needs: Iterable[Need]) -> list[tuple[int, int]]:
    """The (generation, step) pairs, newest first, whose files cover every tensor the new mesh
    needs whole. A generation's files share one layout; two generations may have saved the same
    step in two layouts, so their files never mix. The newest generation comes first whatever
    its step: one that went back to an older step (a restore from a checkpoint) is the job's
    timeline now, not the steps it left behind."""
    shapes = {need.key: need.shape for need in needs}
    held: dict[tuple[int, int], dict[str, set[Box]]] = defaultdict(lambda: defaultdict(set))
    for file in files:
        for key, box in file.boxes:
            held[(file.generation, file.step)][key].add(box)
    return sorted((at for at, boxes in held.items()
                   if all(covers(boxes.get(key, ()), shape) for key, shape in shapes.items())),
                  reverse=True)


def plan(files: Iterable[ShardFile], needs: Iterable[Need], node_of: Mapping[int, str]) -> list[Transfer]:
    """The copies that fill every need from `files` (one step's, of one generation), nearest
    first: a file on the needing rank's node it reads itself; else a file on another node, read
    and sent by the rank on that node with the least to send so far (ties: the lowest rank). The
    same on every rank: inputs in any order give the same list, ordered as each pair of ranks
    must post them.
    Raises ValueError if a need cannot be filled."""
    readers: dict[str, list[int]] = defaultdict(list)
    for rank, node in sorted(node_of.items()):
        readers[node].append(rank)
    holders: dict[tuple[str, Box], list[ShardFile]] = defaultdict(list)
    for file in sorted(set(files), key=lambda f: (f.node, f.path)):
        for key, box in file.boxes:
            if math.prod(box[1]) > 0:
                holders[(key, box)].append(file)
    chunks: dict[str, list[Box]] = defaultdict(list)
    for key, box in holders:
        chunks[key].append(box)
    sending: dict[int, int] = defaultdict(int)
    out: list[Transfer] = []
    for need in sorted(needs, key=lambda n: (n.rank, n.key)):
        filled = 0
        for chunk in sorted(chunks.get(need.key, ())):
            shared = overlap(chunk, need.box)
            if shared is None:
                continue
            src, file = _nearest(holders[(need.key, chunk)], need.rank, node_of[need.rank], readers, sending)
            out.append(Transfer(
                src, need.rank, file.path, need.key,
                tuple(s - c for s, c in zip(shared[0], chunk[0], strict=True)),
                tuple(s - n for s, n in zip(shared[0], need.box[0], strict=True)), shared[1]))
            if src != need.rank:
                sending[src] += math.prod(shared[1])
            filled += math.prod(shared[1])
        if filled != math.prod(need.box[1]):
            raise ValueError(f"rank {need.rank}'s part of {need.key} is not covered by the snapshots")
    return sorted(out, key=lambda t: (t.src, t.dst, t.key, t.dst_at))


def _nearest(files: list[ShardFile], rank: int, node: str, readers: Mapping[str, list[int]],
             sending: Mapping[int, int]) -> tuple[int, ShardFile]:
    for file in files:
        if file.node == node:
            return rank, file
    candidates = [(sending[r], r, file) for file in files for r in readers.get(file.node, ())]
    if not candidates:
        raise ValueError(f"no live rank can read the snapshots holding a part rank {rank} needs")
    _, src, file = min(candidates, key=lambda c: (c[0], c[1]))
    return src, file
