"""The cluster's network: nodes on leaf switches, leaves on one spine, and the hops between them
(docs/planner.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from trainmedic.schemas.plan import ClusterNode

# A switch is a tagged tuple, so that a leaf named "spine" stays a leaf.
Switch = tuple[str, str]
SPINE: Switch = ("spine", "spine")


def switch_hops(a: Switch, b: Switch) -> int:
    """Hops between two switches of the star (leaves around one spine): none to itself, one between
    a leaf and the spine, two between two leaves. A node is always one hop below its own switch,
    and a node whose `switch` is null hangs directly off the spine."""
    if a == b:
        return 0
    return 1 if SPINE in (a, b) else 2


class Topology:
    """Where each node of one cluster hangs, and the hops between them."""

    def __init__(self, nodes: Iterable[ClusterNode]) -> None:
        # node id -> its leaf switch's name; the tagged switch is made when asked for, since a plan
        # asks for few of a large cluster's nodes
        self.leaf: dict[str, str | None] = {node.id: node.switch for node in nodes}

    def switch_of(self, node: str) -> Switch:
        """The switch a node hangs off (the spine for a node with no leaf switch)."""
        leaf = self.leaf[node]
        return SPINE if leaf is None else ("leaf", leaf)

    def hops(self, a: str, b: str) -> int:
        """Hops between two nodes: up to a switch, across the switches, and down."""
        if a == b:
            return 0
        return 2 + switch_hops(self.switch_of(a), self.switch_of(b))
