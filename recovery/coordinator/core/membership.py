"""Nodes enroll and are removed without a config edit or a restart (docs/coordinator.md, "Enrollment").
An operator's `node_enrolled` lets whoever holds its join token register the node once; the node's
`node_registered`, signed with the token's key (provenance.py checks it), makes it a member, at the
address it gave, with the key it registered; it takes work once its executor joined with that key
(`Node.admitted`: a signed registration, then a signed heartbeat). An operator's `node_removed` takes it
out: its key is trusted no more and its jobs move off it as for a leave, until it is enrolled again.
Enrollments are kept by their token, removals by their time, so that the fold does not depend on the
order in which the nodes and acks topics are read.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import replace

from trainmedic.recovery.coordinator.core.lifecycle import capacity_changed
from trainmedic.recovery.coordinator.core.state import ClusterState, Enrollment, Rejected
from trainmedic.recovery.join_token import public_of
from trainmedic.schemas.commands import NodeKeyRotated, NodeRegistered
from trainmedic.schemas.nodes import NodeEnrolled, NodeRemoved, PublicKey

log = logging.getLogger(__name__)

# A registration's time may be this far outside its token's span (from the enrollment to `expires`):
# the registrar checked the span by its own clock when it let the node in; clocks differ this much.
SKEW_S = 60.0
# A key a node rotated away from still signs for this long after the rotation's time: what the node
# signed with it before its executor took the new key up (a second or so) is still in flight.
ROTATION_GRACE_S = 600.0
MAX_RETIRED = 8  # keys a node rotated away from, kept (for a rebuild's old records); the oldest dropped


def enrolled(state: ClusterState, event: NodeEnrolled) -> None:
    """Keep the enrollment by its token: only that token may register the node, once."""
    _check(event.token, f"enrollment of node {event.node}: its token")
    known = state.enrollments.get(event.token.key_id)
    if known is not None and known.node != event.node:
        raise Rejected(f"enrollment of node {event.node}: its token already enrolls node {known.node}")
    if known is None:
        state.enrollments[event.token.key_id] = Enrollment(event.node, event.ts, event.token, event.expires)


def registered(state: ClusterState, event: NodeRegistered) -> None:
    """The node joins the cluster with its key (signed by its enrollment's token: provenance.py).
    Rejected when no enrollment of the node has that token, outside the token's span, after a
    removal of the node that followed the enrollment, when the token registered already, or when
    another node holds the key."""
    enrollment = state.enrollments.get(event.key_id or "")
    if enrollment is None or enrollment.node != event.node:
        raise Rejected(f"registration of node {event.node}: no enrollment of it by the token {event.key_id} "
                       f"(an operator runs `trainmedic nodes enroll {event.node}`)")
    if not enrollment.ts - SKEW_S <= event.ts <= enrollment.expires + SKEW_S:
        raise Rejected(f"registration of node {event.node}: outside its join token's span (enrolled at "
                       f"{enrollment.ts:.0f}, expired at {enrollment.expires:.0f}, registered at "
                       f"{event.ts:.0f}): enroll it again")
    ended = ended_at(state, enrollment)
    if ended is not None and event.ts > ended:
        raise Rejected(f"registration of node {event.node}: the node was removed after this token's "
                       "enrollment: enroll it again")
    _check(event.key, f"registration of node {event.node}: its key")
    done = (event.key.key_id, event.ts)
    if enrollment.registered is not None:
        if enrollment.registered == done:
            return  # this registration, folded already
        raise Rejected(f"registration of node {event.node}: its join token registered the node already "
                       f"(key {enrollment.registered[0]}): a token registers once")
    holder = state.key_owners.get(event.key.key_id)
    if holder is not None and holder != event.node:
        raise Rejected(f"registration of node {event.node}: key {event.key.key_id} is node {holder}'s")
    state.key_owners[event.key.key_id] = event.node
    state.enrollments[enrollment.token.key_id] = replace(enrollment, registered=done)
    state.members.add(event.node)
    node = state.node(event.node)
    if node.registered_ts is None or event.ts > node.registered_ts:
        node.key, node.registered_ts, node.retired = event.key, event.ts, ()
        node.address, node.gpus = event.address, event.gpus  # no capacity yet: its join adds it
    removals = state.removals.get(event.node, ())
    if removals and (node.removed_ts is None or removals[-1] > node.removed_ts):
        node.removed_ts = removals[-1]  # a removal read before this registration still counts


def rotated(state: ClusterState, event: NodeKeyRotated) -> None:
    """An enrolled node's key replaced by `event.key`, signed by its current key (`rotation_signer`,
    provenance.py): the new key is the node's from here, the old one signs only until ROTATION_GRACE_S
    after the rotation and rotates nothing. Rejected for a node not enrolled (one whose keys are trusted
    by hand rotates by hand), removed since its registration, a rotation older than the node's
    registration or last rotation (a replay), or a key any node had."""
    node = state.nodes.get(event.node)
    if not state.in_cluster(event.node) or node is None or node.key is None or node.registered_ts is None:
        raise Rejected(f"key rotation of node {event.node}: not an enrolled node (a node whose keys are "
                       f"trusted by hand rotates by hand: `trainmedic keys rotate --node {event.node} "
                       "--no-announce`)")
    _check(event.key, f"key rotation of node {event.node}: its new key")
    until = event.ts + ROTATION_GRACE_S
    if node.key.key_id == event.key.key_id and node.retired and node.retired[-1][:2] == (event.key_id, until):
        return  # this rotation, folded already (a rebuild folds it again)
    if event.key_id != node.key.key_id:
        raise Rejected(f"key rotation of node {event.node}: signed by key {event.key_id}, not by the node's "
                       f"current key {node.key.key_id} (a key rotated away from rotates nothing)")
    last = max((node.registered_ts, *(at - ROTATION_GRACE_S for _, at, _ in node.retired)))
    if event.ts <= last:
        raise Rejected(f"key rotation of node {event.node}: dated {event.ts:.0f}, not after the node's "
                       f"registration or last rotation ({last:.0f}): a replay")
    if any(node.registered_ts < at <= event.ts for at in state.removals.get(event.node, ())):
        raise Rejected(f"key rotation of node {event.node}: the node was removed after its registration")
    holder = state.key_owners.get(event.key.key_id)
    if holder is not None:
        raise Rejected(f"key rotation of node {event.node}: key {event.key.key_id} is "
                       + ("a key the node had" if holder == event.node else f"node {holder}'s"))
    state.key_owners[event.key.key_id] = event.node
    node.retired = (*node.retired, (node.key.key_id, until, node.key))[-MAX_RETIRED:]
    node.key = event.key


def removed(state: ClusterState, event: NodeRemoved) -> None:
    """The node leaves for good: its tokens register it no more, and a member is removed
    (`Node.removed`)."""
    times = state.removals.get(event.node, ())
    if event.ts not in times:
        state.removals[event.node] = tuple(sorted((*times, event.ts)))
    if event.node not in state.members:
        if not any(e.node == event.node for e in state.enrollments.values()):
            log.warning("node_removed for node %s, which is neither a member nor enrolled", event.node)
        return
    node = state.node(event.node)
    if node.removed_ts is None or event.ts > node.removed_ts:
        node.removed_ts, node.removed_reason = event.ts, event.reason
        capacity_changed(state, event.ts)


def ended_at(state: ClusterState, enrollment: Enrollment) -> float | None:
    """The time of the first removal of its node at or after the enrollment; None if none."""
    times = state.removals.get(enrollment.node, ())
    at = bisect.bisect_left(times, enrollment.ts)
    return times[at] if at < len(times) else None


def _check(key: PublicKey, what: str) -> None:
    try:
        public_of(key)
    except ValueError as err:
        raise Rejected(f"{what} is no Ed25519 public key: {err}") from None


def node_keys(state: ClusterState) -> dict[str, tuple[PublicKey, ...]]:
    """Node -> the key it registered or rotated to last, and those it rotated away from (a removed
    node's too: `removed_nodes` says which)."""
    return {node.id: tuple(k for k in (node.key, *(kept for _, _, kept in node.retired)) if k is not None)
            for node in state.nodes.values() if node.key is not None or node.retired}


def retired(state: ClusterState) -> dict[str, float]:
    """Key id -> until when it signs: the keys nodes rotated away from."""
    return {key_id: until for node in state.nodes.values() for key_id, until, _ in node.retired}


def removed_nodes(state: ClusterState) -> frozenset[str]:
    """The nodes an operator removed: no key signs for them, whoever trusted it."""
    return frozenset(node.id for node in state.nodes.values() if node.removed)


def tokens(state: ClusterState) -> dict[str, tuple[str, PublicKey]]:
    """Token key id -> (node, the token's key), for every enrollment: its registration is checked
    with it, on a rebuild too (the fold rejects one outside its span or after a removal)."""
    return {key_id: (e.node, e.token) for key_id, e in state.enrollments.items()}


def pending(state: ClusterState) -> list[Enrollment]:
    """The newest enrollment of each node that is not a member, when its token has not registered
    and no removal ended it: for `nodes list`, the nodes enrolled but not joined (yet, or whose
    token expired)."""
    latest: dict[str, Enrollment] = {}
    for e in state.enrollments.values():
        if e.node not in latest or e.ts > latest[e.node].ts:
            latest[e.node] = e
    return [e for node, e in sorted(latest.items())
            if node not in state.members and e.registered is None and ended_at(state, e) is None]
