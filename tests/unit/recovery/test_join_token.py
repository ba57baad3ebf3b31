"""A join token round-trips, pins the CA's exact bytes, derives one key from its secret, and refuses
garbage with a clear ValueError; a public key round-trips through the schemas' `PublicKey`."""

from __future__ import annotations

import base64
import json

import pytest

from trainmedic.recovery import join_token
from trainmedic.recovery.join_token import (
    HOST_ROLES,
    PREFIX,
    JoinToken,
    ca_pin,
    make_token,
    parse,
    public_key_model,
    public_of,
    role_files,
    token_key,
)
from trainmedic.recovery.signing import TrustedKeys, generate
from trainmedic.schemas import NodeRegistered, PublicKey

CA = b"-----BEGIN CERTIFICATE-----\nMIIB...\n-----END CERTIFICATE-----\n"


def test_a_token_round_trips_and_its_key_signs() -> None:
    text, key = make_token("n7", CA, 9443)
    assert text.startswith(PREFIX) and "=" not in text
    token = parse(text)
    assert (token.node, token.port, token.ca_sha256) == ("n7", 9443, ca_pin(CA))
    assert token_key(token.secret).key_id == key.key_id
    assert token.secret.hex() not in repr(token)
    own = public_key_model(generate().private.public_key())
    registration = key.sign(NodeRegistered(ts=1.0, node="n7", key=own, address="10.0.0.7", deployment="t."))
    trusted = TrustedKeys.of(key.private.public_key())
    assert trusted.signer(registration.model_dump_json(), "r", "t.") == key.key_id


def test_two_tokens_have_two_keys_and_the_pin_is_of_the_exact_bytes() -> None:
    first, second = make_token("n7", CA, 9443), make_token("n7", CA, 9443)
    assert first[0] != second[0] and first[1].key_id != second[1].key_id
    assert parse(first[0]).ca_sha256 != ca_pin(CA + b"\n")


def _encoded(body: object) -> str:
    return PREFIX + base64.urlsafe_b64encode(json.dumps(body).encode()).decode().rstrip("=")


GOOD = {"node": "n1", "ca": "a" * 64, "port": 9443, "secret": "b" * 64}


@pytest.mark.parametrize(("text", "said"), [
    ("", "must start with"),
    ("tmjoin2.abc", "must start with"),
    (PREFIX + "!!!", "cannot decode"),
    (PREFIX + "a" * 3000, "at most"),
    (_encoded([1, 2]), "must hold"),
    (_encoded({**GOOD, "extra": 1}), "must hold"),
    (_encoded({**GOOD, "node": ""}), "node is no name"),
    (_encoded({**GOOD, "ca": "xyz"}), "CA pin"),
    (_encoded({**GOOD, "port": 0}), "port"),
    (_encoded({**GOOD, "port": True}), "port"),
    (_encoded({**GOOD, "secret": "b" * 62}), "secret"),
])
def test_garbage_is_refused_saying_why(text: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        parse(text)


def test_a_cut_token_is_refused() -> None:
    text, _ = make_token("n1", CA, 9443)
    with pytest.raises(ValueError, match="not a join token"):
        parse(text[:-20])
    token = JoinToken("n1", "a" * 64, 9443, bytes.fromhex("b" * 64))
    assert parse(_encoded(GOOD)) == token == parse(str(token))


def test_a_public_key_round_trips_and_a_wrong_id_is_refused() -> None:
    public = generate().private.public_key()
    model = public_key_model(public)
    assert public_of(model).public_bytes_raw() == public.public_bytes_raw()
    with pytest.raises(ValueError, match="bytes are key"):
        public_of(PublicKey(key_id="0" * 16, public=model.public))
    with pytest.raises(ValueError, match="32"):
        public_of(PublicKey(key_id=model.key_id, public=base64.b64encode(b"x" * 31).decode()))
    with pytest.raises(ValueError, match="base64"):
        public_of(PublicKey(key_id=model.key_id, public="not base64!"))


def test_the_token_key_is_the_secrets_only() -> None:
    assert token_key(b"\x01" * 32).key_id == token_key(b"\x01" * 32).key_id != token_key(b"\x02" * 32).key_id
    with pytest.raises(ValueError, match="32 bytes"):
        token_key(b"short")


def test_a_deeply_nested_token_is_refused_as_garbage(monkeypatch: pytest.MonkeyPatch) -> None:
    deep = PREFIX + base64.urlsafe_b64encode(b"[" * 1500).decode().rstrip("=")  # JSON's recursion overflows
    with pytest.raises(ValueError, match="at most 1024"):
        parse(deep)

    def overflow(_: bytes) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(join_token.json, "loads", overflow)
    with pytest.raises(ValueError, match="cannot decode it"):
        parse(_encoded(GOOD))


HOST = {"roles": ["coordinator", "detector"], "ca": "a" * 64, "port": 9443, "secret": "b" * 64}


def test_a_host_token_round_trips_with_its_roles_and_no_node() -> None:
    text, key = make_token(None, CA, 9443, ("detector", "coordinator"))
    token = parse(text)
    assert (token.node, token.roles, token.port, token.ca_sha256) == (None, ("detector", "coordinator"), 9443,
                                                                      ca_pin(CA))
    assert token_key(token.secret).key_id == key.key_id and parse(str(token)) == token
    assert parse(_encoded(HOST)) == JoinToken(None, "a" * 64, 9443, bytes.fromhex("b" * 64),
                                              ("coordinator", "detector"))


@pytest.mark.parametrize(("body", "said"), [
    ({**HOST, "node": "n1"}, "must hold"),
    ({k: v for k, v in HOST.items() if k != "roles"}, "must hold"),
    ({**HOST, "roles": ["detector", "admin"]}, "roles are not"),
    ({**HOST, "roles": []}, "roles are not"),
    ({**HOST, "roles": ["detector", "detector"]}, "roles are not"),
    ({**HOST, "roles": "detector"}, "roles are not"),
    ({**HOST, "roles": [["detector"]]}, "roles are not"),
])
def test_a_host_token_must_name_some_roles_once(body: dict, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        parse(_encoded(body))


def test_a_host_gets_the_ca_and_each_roles_files() -> None:
    files = role_files(("detector", "coordinator"))
    assert files[0] == "ca.pem"
    assert {"detector.json", "telemetry-master.key", "coordinator.json"} <= set(files)
    assert "operator.json" not in files and len(files) == 4
    assert role_files(tuple(HOST_ROLES)).count("ca.pem") == 1
