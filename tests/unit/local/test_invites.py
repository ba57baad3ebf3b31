"""A control-plane host's invitation (`trainmedic broker invite`): stored 0600 and round-tripping, and
which joins `check_host` lets in: signed by the invitation's token key for this deployment, of exactly
its roles, one key per signing role, before it expires, dated within the clocks' skew, once."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest

from trainmedic.common.errors import ConfigError
from trainmedic.local.enrollments import MAX_BODY, SKEW_S, Refused
from trainmedic.local.invites import (
    INVITES_FILE,
    HostAccepted,
    Invitation,
    Invites,
    check_host,
    invite,
    roles_of,
)
from trainmedic.recovery.join_token import make_token, parse, possession, public_key_model, token_key
from trainmedic.recovery.signing import SigningKey, generate
from trainmedic.schemas import HostJoin, RoleKey, encode

CA = b"ca bytes"
DEP = "trainmedic."
NOW = 1000.0
TTL = 600.0
CONTROL = ("coordinator", "detector")
COORDINATOR, OPERATOR = ("coordinator", generate()), ("operator", generate())  # a host's keys, by role


def invited(broker: Path, roles: tuple[str, ...] = CONTROL) -> SigningKey:
    """A new invitation of a host of `roles` at NOW for TTL: its token's key."""
    text, expires = invite(broker, CA, roles, TTL, 9443, NOW)
    assert expires == NOW + TTL and parse(text).roles == roles and parse(text).node is None
    return token_key(parse(text).secret)


def role_key(role: str, key: SigningKey, token: SigningKey, deployment: str = DEP) -> RoleKey:
    """`key` for `role`, with its proof of possession for `token`'s join."""
    proof = base64.b64encode(key.private.sign(possession(token.key_id, role, deployment))).decode()
    return RoleKey(role=role, key=public_key_model(key.private.public_key()), proof=proof)


def join(signer: SigningKey, roles: tuple[str, ...] = CONTROL, keys: tuple = (COORDINATOR,),
         ts: float = NOW + 1, deployment: str = DEP) -> HostJoin:
    """A host's join signed by `signer`; `keys` as (role, SigningKey), proved for this token, or RoleKeys."""
    made = tuple(key if isinstance(key, RoleKey) else role_key(*key, signer, deployment) for key in keys)
    return signer.sign(HostJoin(ts=ts, roles=roles, keys=made, deployment=deployment))


def check(broker: Path, body: HostJoin | bytes, now: float = NOW + 5) -> HostAccepted | Refused:
    raw = body if isinstance(body, bytes) else encode(body)
    return check_host(Invites(broker / INVITES_FILE).load(), now, raw, DEP)


def assert_refused(verdict: HostAccepted | Refused, status: int, kind: str) -> None:
    assert isinstance(verdict, Refused), verdict
    assert (verdict.status, verdict.kind) == (status, kind), verdict.message


def test_a_control_host_is_let_in_with_its_coordinator_key(tmp_path: Path) -> None:
    signer = invited(tmp_path)
    verdict = check(tmp_path, join(signer))
    assert isinstance(verdict, HostAccepted)
    assert verdict.join.roles == CONTROL and verdict.join.keys == (role_key(*COORDINATOR, signer),)
    assert verdict.invitation.roles == CONTROL and verdict.invitation.token.key_id == signer.key_id


def test_another_tokens_key_is_not_invited(tmp_path: Path) -> None:
    invited(tmp_path)
    _, stranger = make_token(None, CA, 9443, CONTROL)
    assert_refused(check(tmp_path, join(stranger)), 403, "not_invited")


def test_a_body_changed_after_signing_is_refused(tmp_path: Path) -> None:
    signed = join(invited(tmp_path))
    assert_refused(check(tmp_path, signed.model_copy(update={"ts": NOW + 2})), 403, "bad_signature")


def test_a_join_for_another_deployment_is_refused(tmp_path: Path) -> None:
    assert_refused(check(tmp_path, join(invited(tmp_path), deployment="other.")), 403, "other_deployment")


def test_the_roles_must_be_the_invitations(tmp_path: Path) -> None:
    signer = invited(tmp_path)
    assert_refused(check(tmp_path, join(signer, roles=("detector",), keys=())), 403, "other_roles")
    assert_refused(check(tmp_path, join(signer, roles=("coordinator", "detector", "operator"),
                                        keys=(COORDINATOR, OPERATOR))), 403, "other_roles")


def test_one_key_per_signing_role_and_no_other(tmp_path: Path) -> None:
    assert_refused(check(tmp_path, join(invited(tmp_path), keys=())), 400, "keys")
    detector = invited(tmp_path, ("detector",))
    assert_refused(check(tmp_path, join(detector, roles=("detector",), keys=(OPERATOR,))), 400, "keys")
    assert isinstance(check(tmp_path, join(detector, roles=("detector",), keys=())), HostAccepted)
    signer = invited(tmp_path)
    proved = role_key(*COORDINATOR, signer)
    forged = proved.model_copy(update={"key": proved.key.model_copy(update={"key_id": "0" * 16})})
    assert_refused(check(tmp_path, join(signer, keys=(forged,))), 400, "keys")  # before spending


def test_each_key_proves_the_host_holds_it_for_this_token(tmp_path: Path) -> None:
    signer, other = invited(tmp_path), invited(tmp_path)
    proved = role_key(*COORDINATOR, signer)
    someone_elses = proved.model_copy(update={"proof": role_key("coordinator", generate(), signer).proof})
    for key in (someone_elses, role_key(*COORDINATOR, other), proved.model_copy(update={"proof": None}),
                role_key(*COORDINATOR, signer, deployment="other.")):
        assert_refused(check(tmp_path, join(signer, keys=(key,))), 403, "keys")
    assert_refused(check(tmp_path, join(signer, keys=(("coordinator", signer),))), 400, "keys")  # the token's


def test_an_expired_invitation_is_refused(tmp_path: Path) -> None:
    signer = invited(tmp_path)
    assert isinstance(check(tmp_path, join(signer), now=NOW + TTL - 1), HostAccepted)
    assert_refused(check(tmp_path, join(signer), now=NOW + TTL), 403, "expired")


def test_a_join_dated_off_the_clocks_is_refused(tmp_path: Path) -> None:
    signer = invited(tmp_path)
    assert isinstance(check(tmp_path, join(signer, ts=NOW - SKEW_S)), HostAccepted)
    assert_refused(check(tmp_path, join(signer, ts=NOW - SKEW_S - 1)), 403, "clock")
    assert_refused(check(tmp_path, join(signer, ts=NOW + 5 + SKEW_S + 1), now=NOW + 5), 403, "clock")


def test_a_used_invitation_is_refused_and_the_use_is_stored(tmp_path: Path) -> None:
    signer = invited(tmp_path)
    Invites(tmp_path / INVITES_FILE).use(signer.key_id, NOW + 2)
    assert Invites(tmp_path / INVITES_FILE).load()[signer.key_id].used == NOW + 2
    assert_refused(check(tmp_path, join(signer)), 409, "used")


def test_junk_is_refused(tmp_path: Path) -> None:
    invited(tmp_path)
    assert_refused(check(tmp_path, b"x" * (MAX_BODY + 1)), 413, "too_large")
    assert_refused(check(tmp_path, b"not json"), 400, "invalid")
    assert_refused(check(tmp_path, b'{"type": "host_join", "ts": 1.0, "roles": []}'), 400, "invalid")


def test_the_invitations_are_private_and_round_trip(tmp_path: Path) -> None:
    first, second = invited(tmp_path), invited(tmp_path, ("operator",))
    path = tmp_path / INVITES_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first_key, second_key = (public_key_model(key.private.public_key()) for key in (first, second))
    assert Invites(path).load() == {first.key_id: Invitation(first_key, CONTROL, NOW, NOW + TTL),
                                    second.key_id: Invitation(second_key, ("operator",), NOW, NOW + TTL)}
    assert Invites(tmp_path / "none.json").load() == {}
    for junk in ("{not json", '{"invites": []}'):
        path.write_text(junk)
        with pytest.raises(ConfigError, match="cannot read the invitations"):
            Invites(path).load()


def test_roles_are_named_in_host_roles_order() -> None:
    assert roles_of(["detector", "coordinator"]) == roles_of(["coordinator", "detector"]) == CONTROL
    for words in ([], ["admin"], ["detector", "admin"]):
        with pytest.raises(ConfigError, match="invite which roles"):
            roles_of(words)


@pytest.mark.parametrize("roles", [(), ("admin",), ("detector", "detector")])
def test_an_invitation_names_some_roles_once(tmp_path: Path, roles: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError, match="invite which roles"):
        invite(tmp_path, CA, roles, TTL, 9443, NOW)


@pytest.mark.parametrize(("ttl", "port"), [(0.0, 9443), (8 * 24 * 3600.0, 9443), (TTL, 0), (TTL, 65536)])
def test_an_invitation_needs_a_span_and_a_port(tmp_path: Path, ttl: float, port: int) -> None:
    with pytest.raises(ConfigError, match="--expires"):
        invite(tmp_path, CA, CONTROL, ttl, port, NOW)
    assert not (tmp_path / INVITES_FILE).exists()
