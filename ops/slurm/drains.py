"""What Slurm should know of the nodes the healer isolated (issue 46, docs/slurm.md): each isolated node
drained with trainmedic's reason, so that no later job lands there, and resumed once re-admitted. A
pure reconciliation of the coordinator's state with Slurm's view of its nodes: run again and again, it
asks for nothing twice and picks up whatever it missed.

Only drains trainmedic set (their reason starts with `trainmedic:`) are ever lifted by it: a drain a
person set is never touched, nor is a node a person drained before trainmedic isolated it."""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Literal

from trainmedic.recovery.coordinator.core.lifecycle import status
from trainmedic.recovery.coordinator.core.state import ClusterState

PREFIX = "trainmedic:"
MAX_REASON = 200  # Slurm keeps a node's reason as given: bounded, one printable line
MAX_EVIDENCE = 80
SAFE = frozenset(string.ascii_letters + string.digits + " ._:,=/+-@%")
NOT_RESPONDING = "Not responding"  # the reason slurmctld itself gives a node it lost: trainmedic's to replace


@dataclass(frozen=True)
class SlurmNode:
    """A node as Slurm shows it: whether it is drained (or draining) and the reason Slurm holds."""

    name: str
    drained: bool
    reason: str = ""

    @property
    def ours(self) -> bool:
        return self.drained and self.reason.startswith(PREFIX)


@dataclass(frozen=True)
class Change:
    verb: Literal["drain", "resume"]
    node: str
    reason: str = ""


def printable(text: str, limit: int) -> str:
    """`text` as one line of letters, digits and plain punctuation, at most `limit` characters: a
    site's drain command may pass the reason through a shell, and telemetry wrote some of it."""
    line = "".join(c if c in SAFE else " " for c in text)
    line = " ".join(line.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def detail(evidence: str) -> list[str]:
    """An incident's first line of evidence, less the time it starts with, in at most MAX_EVIDENCE
    characters of whole words."""
    words = printable(evidence, len(evidence)).split()
    if words and words[0].replace(".", "", 1).isdigit():
        words = words[1:]
    kept: list[str] = []
    for word in words:
        if len(" ".join([*kept, word])) > MAX_EVIDENCE:
            break
        kept.append(word)
    return kept


def isolated(state: ClusterState) -> dict[str, str]:
    """Each node the coordinator holds isolated, with the drain reason Slurm gets for it."""
    out = {}
    for node_id, node in state.nodes.items():
        if status(state, node_id) != "isolated":
            continue
        incident = state.incidents.get(node.isolated_by or "")
        what = "isolated"
        if incident is not None:
            what = " ".join([incident.category, *(detail(incident.evidence[0]) if incident.evidence else [])])
        out[node_id] = printable(f"{PREFIX} {what}, incident {node.isolated_by}", MAX_REASON)
    return out


def changes(state: ClusterState, slurm: dict[str, SlurmNode]) -> list[Change]:
    """Drain each isolated node Slurm has that holds no one else's reason (none, or Slurm's own for a
    node it lost: a person's DOWN, FAIL or maintenance keeps its reason, and so is never lifted later);
    resume each node trainmedic drained that the coordinator no longer holds isolated (re-admitted,
    uncordoned) and did not remove. Nodes Slurm does not know, and nodes this deployment does not
    know, are left alone."""
    wanted = isolated(state)
    out = [Change("drain", node, reason) for node, reason in sorted(wanted.items())
           if node in slurm and not slurm[node].drained and slurm[node].reason in ("", NOT_RESPONDING)]
    out += [Change("resume", name) for name, node in sorted(slurm.items())
            if node.ours and name in state.nodes and name not in wanted
            and status(state, name) != "removed"]
    return out


def parse_sinfo(text: str) -> dict[str, SlurmNode]:
    """`sinfo --noheader --Node --format=%N|%T|%E`'s lines: a node listed once per partition, its state
    with a suffix for a node not responding (`drained*`), `none` for no reason."""
    nodes = {}
    for line in text.splitlines():
        name, sep, rest = line.strip().partition("|")
        state, _, reason = rest.partition("|")
        if not sep or not name:
            continue
        drained = state.rstrip("*~#$@^-!%").startswith("drain")
        nodes[name] = SlurmNode(name, drained, "" if reason == "none" else reason)
    return nodes
