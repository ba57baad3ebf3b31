"""The cluster's network: nodes on leaf switches, leaves on one spine.

Nodes whose `switch` is null hang directly off the spine. The networkx graph holds only
the switches: a node is always one hop below its own switch, so shortest paths never pass
through a node, and leaving the 16k node vertices out keeps building the graph cheap.
"""

from __future__ import annotations

from collections.abc import Iterable

import networkx as nx

from schemas.plan import ClusterNode

# A switch is a tagged tuple, so that a leaf named "spine" stays a leaf.
Switch = tuple[str, str]
SPINE: Switch = ("spine", "spine")


class Topology:
    """Hop distances between the nodes and switches of one cluster."""

    def __init__(self, nodes: Iterable[ClusterNode]) -> None:
        self.attachment: dict[str, Switch] = {  # node id -> the switch it hangs off
            node.id: SPINE if node.switch is None else ("leaf", node.switch) for node in nodes
        }
        self.graph = nx.Graph()
        self.graph.add_node(SPINE)
        self.graph.add_edges_from((leaf, SPINE) for leaf in set(self.attachment.values()) - {SPINE})
        self._hops_from: dict[Switch, dict[Switch, int]] = {}  # filled per source, on demand

    def switch_of(self, node: str) -> Switch:
        """The switch a node hangs off (the spine for a node with no leaf switch)."""
        return self.attachment[node]

    def hops_from_switch(self, source: Switch) -> dict[Switch, int]:
        """Hops from one switch to every switch."""
        if source not in self._hops_from:
            self._hops_from[source] = nx.single_source_shortest_path_length(self.graph, source)
        return self._hops_from[source]

    def hops(self, a: str, b: str) -> int:
        """Hops between two nodes: up to a switch, across the switches, and down."""
        if a == b:
            return 0
        return 2 + self.hops_from_switch(self.attachment[a])[self.attachment[b]]
