"""What the registrar decides, pure: which nodes an operator enrolled or removed (the verified records
of `nodes`, in log order), and whether a node's registration (`POST /join`) is let in. Time is passed
in; nothing here reads a clock, the network or a file (docs/security.md, "One identity per node").

Every refusal of a well-formed registration is 403, so that the status never tells an unauthenticated
peer whether a name is enrolled; 409 (token used) comes only after the token's signature verified.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pydantic import ValidationError

from trainmedic.recovery.join_token import public_of
from trainmedic.recovery.signing import TrustedKeys, Unverified
from trainmedic.schemas import InvalidEvent, NodeEnrolled, NodeRegistered, NodeRemoved, decode
from trainmedic.schemas.topics import adapter

MAX_BODY = 64 * 1024  # bytes of a registration: one is about 600
SKEW_S = 60.0  # how far a node's clock may be off: as the coordinator allows it


@dataclass
class Enrollments:
    """Each node's latest verified `node_enrolled` or `node_removed`, in the order the log holds them
    (one partition): a node may join while its latest is an enrollment not yet used and not expired."""

    latest: dict[str, NodeEnrolled | NodeRemoved] = field(default_factory=dict)
    refused: list[tuple[int, str]] = field(default_factory=list)  # (offset, why) of records not believed

    def apply(self, offset: int, raw: bytes | None, trusted: TrustedKeys, deployment: str) -> None:
        """Apply one record of `nodes` (a refused one is kept in `refused`, with why; other events are
        passed over). Believed only when signed by a trusted operator key for `deployment`."""
        try:
            event = decode(raw, adapter("nodes"))
        except InvalidEvent as err:
            self.refused.append((offset, f"not a node event: {err}"))
            return
        if not isinstance(event, NodeEnrolled | NodeRemoved):
            return
        try:
            trusted.signer(raw, f"{event.type} of node {event.node}", deployment)
        except Unverified as err:
            self.refused.append((offset, str(err)))
            return
        self.latest[event.node] = event

    @classmethod
    def of(cls, records: Iterable[tuple[int, bytes | None]], trusted: TrustedKeys,
           deployment: str) -> Enrollments:
        """The enrollments the (offset, value) records of `nodes` make, applied in their order."""
        state = cls()
        for offset, raw in records:
            state.apply(offset, raw, trusted, deployment)
        return state

    def removed(self) -> set[str]:
        """The nodes whose latest word is a removal: none of them may hold a principal."""
        return {node for node, event in self.latest.items() if isinstance(event, NodeRemoved)}


@dataclass(frozen=True)
class Refused:
    """A registration turned away: the HTTP status, a short label (logs, tests) and what to do."""

    status: int
    kind: str
    message: str


@dataclass(frozen=True)
class Accepted:
    """A registration let in: the node's own record, and the enrollment it redeems."""

    registration: NodeRegistered
    enrollment: NodeEnrolled


def check_join(state: Enrollments, used: frozenset[str] | set[str], now: float, body: bytes,
               deployment: str) -> Accepted | Refused:
    """Whether `body` (a `node_registered` JSON signed by a join token's key) may register its node
    now: the node's latest enrollment stands, names this token's key, has not expired, and its token
    was not used (`used`: token key ids), and the registration is dated from `SKEW_S` before the
    enrollment to `SKEW_S` after `now`."""
    if len(body) > MAX_BODY:
        return Refused(413, "too_large", f"the registration is {len(body)} bytes, at most {MAX_BODY}")
    try:
        registration = NodeRegistered.model_validate_json(body)
    except ValidationError as err:  # bytes that are no JSON, or no UTF-8, too
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "the body"
        return Refused(400, "invalid", f"not a node registration: {where}: {first['msg']}")
    node = registration.node
    enrollment = state.latest.get(node)
    enroll = f"run `trainmedic nodes enroll {node}` on the operator's host and join with its new token"
    if enrollment is None:
        return Refused(403, "not_enrolled", f"node {node!r} is not enrolled here: {enroll}")
    if isinstance(enrollment, NodeRemoved):
        why = enrollment.reason or "no reason given"
        return Refused(403, "removed", f"node {node!r} was removed ({why}) after its enrollment: {enroll}")
    token = enrollment.token
    if registration.key_id != token.key_id:
        return Refused(403, "other_token", f"the registration of node {node!r} is signed by key "
                       f"{registration.key_id!r}, not by its latest join token ({token.key_id}): a token "
                       f"made before the latest `nodes enroll`, or one for another node? {enroll}")
    try:
        TrustedKeys.of(public_of(token)).signer(body, "node registration", deployment)
    except (Unverified, ValueError) as err:
        kind = err.kind if isinstance(err, Unverified) else "bad_enrollment"
        return Refused(403, kind, f"registration of node {node!r} refused: {err}")
    if now >= enrollment.expires:
        ago = now - enrollment.expires
        return Refused(403, "expired", f"the join token of node {node!r} expired {ago:.0f}s ago: {enroll}")
    if not enrollment.ts - SKEW_S <= registration.ts <= now + SKEW_S:
        early = registration.ts < enrollment.ts - SKEW_S
        when = "before its enrollment" if early else "ahead of the registrar's clock"
        return Refused(403, "clock", f"the registration of node {node!r} is dated more than {SKEW_S:.0f}s "
                                     f"{when}: set the node's clock right (NTP) and join again")
    if token.key_id in used:
        return Refused(409, "used", f"the join token of node {node!r} was used already (a token joins "
                                    f"once): if this host joined, run `trainmedic node` without --join; "
                                    f"else {enroll}")
    return Accepted(registration, enrollment)
