"""Which snapshots a sharded restore takes each piece from: coverage, nearest copy, resharding."""

from __future__ import annotations

import pytest

from trainmedic.runtime.shard_plan import Need, ShardFile, Transfer, covers, overlap, plan, restorable


def rows(start: int, count: int, width: int = 4) -> tuple[tuple[int, int], tuple[int, int]]:
    return (start, 0), (count, width)


def file(node: str, rank: int, step: int, *boxes, generation: int = 0) -> ShardFile:
    return ShardFile(node, f"/{node}/shards{rank}-step{step}.pt", step, generation,
                     tuple(("w", box) for box in boxes))


# HSDP, 2 replica groups (nodes a and b) x 2 shards: rows 0-4 and 5-9 of a 10 x 4 tensor
HSDP = [file("a", 0, 3, rows(0, 5)), file("a", 1, 3, rows(5, 5)),
        file("b", 2, 3, rows(0, 5)), file("b", 3, 3, rows(5, 5))]


def need(rank: int, start: int, count: int) -> Need:
    return Need(rank, "w", rows(start, count), (10, 4))


def test_overlap_and_cover() -> None:
    assert overlap(rows(0, 5), rows(3, 4)) == rows(3, 2)
    assert overlap(rows(0, 5), rows(5, 5)) is None
    assert covers([rows(0, 5), rows(5, 5), rows(0, 5)], (10, 4))  # a replica's copy counts once
    assert not covers([rows(0, 5)], (10, 4))
    assert covers([rows(0, 10), rows(10, 0)], (10, 4))  # an uneven cut leaves a rank an empty shard


def test_a_step_is_restorable_while_one_copy_of_each_shard_survives() -> None:
    needs = [need(0, 0, 10)]
    assert restorable(HSDP, needs) == [(0, 3)]
    assert restorable(HSDP[:2], needs) == [(0, 3)]  # node b lost
    assert restorable([HSDP[0], HSDP[3]], needs) == [(0, 3)]
    assert restorable(HSDP[:1], needs) == []  # rows 5-9 are gone


def test_newest_first_and_generations_never_mix() -> None:
    older = [file("a", 0, 2, rows(0, 10))]
    # generation 1 saved step 3 in another layout, of which only one half survives
    mixed = [*older, file("a", 0, 3, rows(0, 5)), file("c", 0, 3, rows(0, 4), generation=1)]
    assert restorable(mixed, [need(0, 0, 10)]) == [(0, 2)]
    assert restorable([*older, *HSDP], [need(0, 0, 10)]) == [(0, 3), (0, 2)]
    # generation 1 went back to step 2 (from a checkpoint): its timeline wins over step 3 left behind
    back = [*HSDP, file("c", 0, 2, rows(0, 10), generation=1)]
    assert restorable(back, [need(0, 0, 10)]) == [(1, 2), (0, 3)]


def test_each_piece_comes_from_the_needing_ranks_own_node_when_it_can() -> None:
    node_of = {0: "a", 1: "a", 2: "b", 3: "b"}
    needs = [need(0, 0, 5), need(1, 5, 5), need(2, 0, 5), need(3, 5, 5)]
    assert all(t.src == t.dst for t in plan(HSDP, needs, node_of))
    assert {(t.dst, t.path) for t in plan(HSDP, needs, node_of)} == {
        (0, "/a/shards0-step3.pt"), (1, "/a/shards1-step3.pt"),
        (2, "/b/shards2-step3.pt"), (3, "/b/shards3-step3.pt")}


def test_a_new_node_receives_from_the_survivors_spread_over_the_ranks_that_can_send() -> None:
    """Node b lost, node c new, and the mesh regrown to 4 shards of 3, 3, 3 and 1 rows."""
    node_of = {0: "a", 1: "a", 2: "c", 3: "c"}
    needs = [need(0, 0, 3), need(1, 3, 3), need(2, 6, 3), need(3, 9, 1)]
    transfers = plan(HSDP[:2], needs, node_of)
    assert transfers == sorted(transfers, key=lambda t: (t.src, t.dst, t.key, t.dst_at))
    on_c = [t for t in transfers if t.dst in (2, 3)]
    assert {t.src for t in on_c} == {0, 1}  # both of a's ranks send: the load is spread
    # rank 1 (node a) reads both of its pieces itself, from either of a's files
    assert Transfer(1, 1, "/a/shards0-step3.pt", "w", (3, 0), (0, 0), (2, 4)) in transfers
    assert Transfer(1, 1, "/a/shards1-step3.pt", "w", (0, 0), (2, 0), (1, 4)) in transfers
    filled = {}
    for t in transfers:
        filled[t.dst] = filled.get(t.dst, 0) + t.numel
    assert filled == {0: 12, 1: 12, 2: 12, 3: 4}


def test_the_plan_is_the_same_whatever_order_the_ranks_gathered_in() -> None:
    node_of = {0: "a", 1: "a", 2: "c", 3: "c"}
    needs = [need(0, 0, 3), need(1, 3, 3), need(2, 6, 3), need(3, 9, 1)]
    assert plan(HSDP[:2], needs, node_of) == plan(HSDP[1::-1], needs[::-1], dict(reversed(node_of.items())))


def test_a_piece_nobody_can_read_is_an_error_not_a_gap() -> None:
    with pytest.raises(ValueError, match="rank 0's part of w is not covered"):
        plan(HSDP[:1], [need(0, 0, 10)], {0: "a"})
    with pytest.raises(ValueError, match="no live rank can read"):
        plan(HSDP[2:], [need(0, 0, 10)], {0: "a"})


def test_boxes_of_any_dimension_are_cut_to_fit() -> None:
    """Columns (Shard(1)) saved, rows (Shard(0)) needed: each new rank takes a piece of both."""
    cols = [ShardFile("a", "/a/c0", 1, 0, (("w", ((0, 0), (4, 3))),)),
            ShardFile("a", "/a/c1", 1, 0, (("w", ((0, 3), (4, 3))),))]
    needs = [Need(0, "w", ((0, 0), (2, 6)), (4, 6)), Need(1, "w", ((2, 0), (2, 6)), (4, 6))]
    assert restorable(cols, needs) == [(0, 1)]
    assert plan(cols, needs, {0: "a", 1: "a"}) == [
        Transfer(0, 0, "/a/c0", "w", (0, 0), (0, 0), (2, 3)),
        Transfer(0, 0, "/a/c1", "w", (0, 0), (0, 3), (2, 3)),
        Transfer(1, 1, "/a/c0", "w", (2, 0), (0, 0), (2, 3)),
        Transfer(1, 1, "/a/c1", "w", (2, 0), (0, 3), (2, 3))]
