"""Which records the coordinator folds: only those signed by who may write them, for this deployment,
and no incident on `incidents` posing as the coordinator's own (docs/security.md, "What the
coordinator refuses"; docs/coordinator.md, "The adapter, restarts and fail-over").
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import UnionType

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from trainmedic.bus.message import Record
from trainmedic.recovery.coordinator.core import membership
from trainmedic.recovery.coordinator.core.blame import HEALTH_CHECK_FAILED, NODE_SUSPECT
from trainmedic.recovery.coordinator.core.state import ClusterState, Rejected
from trainmedic.recovery.join_token import public_of
from trainmedic.recovery.keyring import COORDINATOR, NODE, OPERATOR
from trainmedic.recovery.signing import TrustedKeys, Unverified
from trainmedic.schemas.commands import (
    Command,
    CommandAcked,
    NodeJoined,
    NodeKeyRotated,
    NodeLeaving,
    NodeRegistered,
    RanksFinished,
)
from trainmedic.schemas.incident import Incident
from trainmedic.schemas.jobs import JobStopRequested, JobSubmitted
from trainmedic.schemas.nodes import (
    NodeCordoned,
    NodeDrained,
    NodeEnrolled,
    NodeRemoved,
    NodeUncordoned,
    PublicKey,
)
from trainmedic.schemas.topics import Topics


@dataclass(frozen=True)
class Trust:
    """The public keys the coordinator trusts: its own, the operators', each node's for that node, and
    each enrollment's join token for that node's registration."""

    own: TrustedKeys
    operators: TrustedKeys
    nodes: TrustedKeys
    owners: Mapping[str, str]  # node key id -> the one node it signs for
    tokens: TrustedKeys = TrustedKeys({})
    enrolls: Mapping[str, str] = field(default_factory=dict)  # token key id -> the node it may register
    retired: Mapping[str, float] = field(default_factory=dict)  # node key id -> until when it signs

    @classmethod
    def of(cls, roles: Mapping[str, TrustedKeys]) -> Trust:
        """From the keys by role (`keyring.load_roles`), each refusing the ids revoked in their folder."""
        nodes = {role.removeprefix(NODE): keys for role, keys in roles.items() if role.startswith(NODE)}
        revoked = frozenset().union(*(keys.revoked for keys in roles.values()))
        empty = TrustedKeys({}, revoked)
        return cls(roles.get(COORDINATOR, empty), roles.get(OPERATOR, empty),
                   TrustedKeys({key_id: key for keys in nodes.values() for key_id, key in keys.keys.items()},
                               revoked),
                   {key_id: node for node, keys in nodes.items() for key_id in keys.keys})

    def without(self, revoked: frozenset[str]) -> Trust:
        """This trust but for the keys `revoked` (KeyFolder, when its folder does not load)."""
        return Trust(self.own.without(revoked), self.operators.without(revoked), self.nodes.without(revoked),
                     {key_id: node for key_id, node in self.owners.items() if key_id not in revoked},
                     self.tokens, self.enrolls, self.retired)

    def with_members(self, state: ClusterState) -> Trust:
        """This trust (of the keys folder) with what the log says of membership (membership.py): the keys
        each enrolled node registered or rotated to (those rotated away from until their time), each
        enrollment's token for its registration, and no key at all for a node an operator removed (its
        keys are refused as revoked)."""
        removed = membership.removed_nodes(state)
        registered = [(node, key) for node, keys in membership.node_keys(state).items() for key in keys
                      if key.key_id not in self.nodes.revoked and self.owners.get(key.key_id, node) == node]
        nodes = {**self.nodes.keys, **{key.key_id: _public(key) for _, key in registered}}
        owners = {**self.owners, **{key.key_id: node for node, key in registered}}
        dropped = frozenset(key_id for key_id, node in owners.items() if node in removed)
        enrolled = membership.tokens(state)
        return Trust(self.own, self.operators, TrustedKeys(nodes, self.nodes.revoked).without(dropped),
                     {key_id: node for key_id, node in owners.items() if key_id not in dropped},
                     TrustedKeys({key_id: _public(key) for key_id, (_, key) in enrolled.items()}),
                     {key_id: node for key_id, (node, _) in enrolled.items()}, membership.retired(state))

    def __str__(self) -> str:
        nodes = sorted(set(self.owners.values()))
        shown = ", ".join(nodes[:10]) + (f" and {len(nodes) - 10} more" if len(nodes) > 10 else "")
        return f"own {self.own}; operators {self.operators}; nodes {shown or 'none'}"


def rotation_signer(record: Record, state: ClusterState, deployment: str | None) -> None:
    """Unverified unless the key rotation `record` is signed by its node's current key (the one it
    registered or rotated to last), for `deployment`: only that key rotates (membership.rotated)."""
    event = record.event
    node = state.nodes.get(event.node)
    if node is None or node.key is None:
        raise Unverified("unknown_key", f"node {event.node} has no key of its own on the log (not enrolled): "
                                        "it rotates by hand")
    TrustedKeys.of(_public(node.key)).signer(record.value, "node_key_rotated", deployment)


def members_first(trust: Trust, state: ClusterState, records: list[Record], topics: Topics | None,
                  fold: Callable[[ClusterState, object], object]) -> Trust:
    """`trust` with the log's membership (`Trust.with_members`), for a rebuild: of `records`, the
    enrollments and removals an operator signed are folded first (`fold`), then the registrations
    their tokens signed and the key rotations their nodes' current keys signed, together in log
    order, so that what an enrolled node signed is checked with the keys it registered and rotated
    to. Linear in the records: a rotation is checked against the state, not a trust made anew."""
    for kinds in ((NodeEnrolled, NodeRemoved), (NodeRegistered, NodeKeyRotated)):
        checked = trust.with_members(state)
        for record in (r for r in records if isinstance(r.event, kinds)):
            if skewed(record) is None and unverified(record, checked, topics, state) is None:
                with contextlib.suppress(Rejected):  # a rebuild logs it, as for every record
                    fold(state, record.event)
    return trust.with_members(state)


def _public(key: PublicKey) -> Ed25519PublicKey:
    """The key, decoded once (a poll's trust names every enrolled node's): the fold checked it decodes."""
    return _decoded(key.key_id, key.public)


@functools.lru_cache(maxsize=1 << 16)
def _decoded(key_id: str, public: str) -> Ed25519PublicKey:
    return public_of(PublicKey(key_id=key_id, public=public))


# Ids (commands.escalation_id, decide.gave_up_id, isolation's alert, health.py's) and categories of the
# incidents only the coordinator raises, on its own `recovery` topic.
OWN_INCIDENT_IDS = ("esc-", "mass-")
OWN_CATEGORIES = frozenset({"mass_failure", "recovery_failed", "reattempt_failed", "restart_failed",
                            "start_failed", "stop_failed", NODE_SUSPECT, HEALTH_CHECK_FAILED})


def impersonates(record: Record, incidents_topic: str) -> Unverified | None:
    """Why `record`, read from the detector's `incidents_topic`, poses as one of the coordinator's
    own incidents; None when it does not."""
    event = record.event
    if record.topic != incidents_topic or not isinstance(event, Incident):
        return None
    if event.id.startswith(OWN_INCIDENT_IDS) or event.category in OWN_CATEGORIES:
        return Unverified("misplaced", f"incident {event.id} ({event.category}) is one only the coordinator "
                                       "raises: it belongs on the recovery topic, never on incidents")
    return None


# How far a node's own clock may be from the broker's for its join and leave to count: their `ts`
# moves cluster-wide timing (the capacity re-plan waits for the newest node event's time).
MAX_NODE_SKEW_S = 60.0


def skewed(record: Record) -> Unverified | None:
    """Why a node's own join, leave or registration carries a time the broker's contradicts (a node
    clock far ahead would hold every capacity re-plan until it, one far behind would leave the node
    "left" after it rejoined; a registration's time must fall in its token's span); None when it
    agrees, or the record has no broker time. The acks topic is created with the broker's clock
    (LogAppendTime); on one created before, a record's time is the node's own and this check finds
    nothing."""
    event, skew = record.event, _ahead_of_broker(record, NodeJoined | NodeLeaving | NodeRegistered
                                                 | NodeKeyRotated)
    if skew is None or abs(skew) <= MAX_NODE_SKEW_S:
        return None
    where = "ahead of" if skew > 0 else "behind"
    return Unverified("clock_skew", f"{event.type} from {event.node} says {event.ts:.0f}, {abs(skew):.0f} s "
                                    f"{where} the broker's time: fix the node's clock (at most "
                                    f"{MAX_NODE_SKEW_S:g} s apart)")


def _ahead_of_broker(record: Record, kinds: type | UnionType) -> float | None:
    """How far the event's own `ts` is ahead of its record's broker time (negative: behind); None
    for other kinds or a record without a time."""
    if not isinstance(record.event, kinds) or record.timestamp_ms is None:
        return None
    return record.event.ts - record.timestamp_ms / 1000


# How far a job submission's time may be from when the broker appended it. The CLIs publish a job
# as they stamp it, so a live one is seconds apart; an older one is a replay (or a clock hours off).
JOB_FRESHNESS_S = 3600.0


def stale(record: Record) -> Unverified | None:
    """Why a job submission is too old (or too far ahead) to start: its `ts` more than
    JOB_FRESHNESS_S from the broker's time of its record; None when fresh or no broker time. The
    broker's time, not the coordinator's clock, so that a restarted coordinator folds the same jobs
    it started live (the jobs topic is stamped by the broker, LogAppendTime)."""
    event, ahead = record.event, _ahead_of_broker(record, JobSubmitted)
    if ahead is None or abs(ahead) <= JOB_FRESHNESS_S:
        return None
    age = -ahead
    where = "older than" if age > 0 else "ahead of"
    return Unverified("stale", f"job submission not started: stale: {event.job.id} says {event.ts:.0f}, "
                               f"{abs(age):.0f} s {where} the broker's time of its record (at most "
                               f"{JOB_FRESHNESS_S:g} s): a replay, or an operator's clock far off")


def unverified(record: Record, trust: Trust | None, topics: Topics | None = None,
               state: ClusterState | None = None) -> Unverified | None:
    """Why `record` (its exact bytes) is not signed by who may write it, for the deployment of
    `topics`; None when it may be folded. Without `topics` (a listing of one topic's records) no
    record is taken for the coordinator's decision and no deployment is checked.

    Who may write what: commands and the decisions on `recovery` the coordinator's own keys (it
    re-signs the commands it re-sends from the fold, so a forged copy naming another node or argv
    must never reach it; an unsigned plan would isolate nodes with no cap); jobs, stops and node
    events (cordon, drain, uncordon) an operator key (the coordinator would sign an unsigned job's
    start itself); node reports (acks, node_joined, node_leaving, ranks_finished) the key of the
    node they name, which never answers for another node; a node's registration the join token of
    its enrollment (`Trust.with_members`); a node's key rotation, given the `state`, the node's current
    key (`rotation_signer`; without it, any key of that node: the fold refuses all but the current).
    With no trust (insecure) every signed kind is folded; `impersonates` is checked either way."""
    if trust is None:
        return None
    event = record.event
    deployment = None if topics is None else topics.prefix
    try:
        if topics is not None and record.topic == topics.recovery:
            trust.own.signer(record.value, "decision", deployment)
            return None
        match event:
            case Command():
                trust.own.signer(record.value, "command", deployment)
            case JobSubmitted():
                trust.operators.signer(record.value, "job submission", deployment)
            case JobStopRequested():
                trust.operators.signer(record.value, "job stop", deployment)
            case NodeCordoned() | NodeDrained() | NodeUncordoned() | NodeEnrolled() | NodeRemoved():
                trust.operators.signer(record.value, "node event", deployment)
            case NodeRegistered():
                token = trust.tokens.signer(record.value, "registration", deployment)
                if trust.enrolls.get(token) != event.node:
                    raise Unverified("wrong_node", f"wrong node: a registration of {event.node} signed by "
                                                   "the join token of another node")
            case NodeKeyRotated() if state is not None:
                rotation_signer(record, state, deployment)
            case CommandAcked() | NodeJoined() | NodeLeaving() | RanksFinished() | NodeKeyRotated():
                what = "ack" if isinstance(event, CommandAcked) else event.type
                key_id = trust.nodes.signer(record.value, what, deployment)
                owner = trust.owners[key_id]
                if owner != event.node:
                    said = "an ack" if what == "ack" else f"a {what}"
                    raise Unverified("wrong_node", f"wrong node: {said} from {event.node} signed by the key "
                                                   f"of node {owner}")
                until = trust.retired.get(key_id)
                appended = None if record.timestamp_ms is None else record.timestamp_ms / 1000
                if until is not None and (appended is None or appended > until):  # no broker time: refused
                    raise Unverified("retired", f"key {key_id} of node {owner} was rotated away from: it "
                                                f"signs nothing after {until:.0f}")
    except Unverified as err:
        return Unverified(err.kind, f"{_who(record, topics)}: {err}")
    return None


def _who(record: Record, topics: Topics | None) -> str:
    if topics is not None and record.topic == topics.recovery:
        return f"{getattr(record.event, 'type', 'record')} not signed by this coordinator, not folded"
    return _WHO.get(type(record.event), "record")


_WHO = {
    Command: "command record not signed by this coordinator, never re-sent",
    JobSubmitted: "job submission not signed by a trusted operator key, not started",
    NodeCordoned: "node event not signed by a trusted operator key, ignored",
    NodeDrained: "node event not signed by a trusted operator key, ignored",
    NodeUncordoned: "node event not signed by a trusted operator key, ignored",
    NodeEnrolled: "enrollment not signed by a trusted operator key, no token of it is taken",
    NodeRemoved: "node removal not signed by a trusted operator key, the node stays",
    NodeRegistered: "registration not signed by its enrollment's join token, the node is not added",
    NodeKeyRotated: "key rotation not signed by a key of its node, the node's keys stay",
    CommandAcked: "ack not signed by its node's key, ignored",
    JobStopRequested: "job stop not signed by a trusted operator key, the job runs on",
    NodeJoined: "node_joined not signed by its node's key, ignored",
    NodeLeaving: "node_leaving not signed by its node's key, the node is not drained",
    RanksFinished: "ranks_finished not signed by its node's key, the job does not end",
}
