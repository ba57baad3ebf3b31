"""The registrar's decisions without a broker: which enrollments and removals it believes (an operator
key trusted here, this deployment), and which registrations it lets in (the latest enrollment, its
token's key, dated within the clocks' skew, before it expires, once; every refusal of a well-formed one
403 but for a used token's, once the signature verified). The registrar around them, with the broker's
calls stood in for: a join for an unknown node holds up no other, a token is spent before the node is
added, a node joining anew gets a new password, a failed deletion is tried at every read, a failure's
detail stays in the log."""

from __future__ import annotations

import datetime as dt
import json
import logging
import select
import socket
import ssl
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from trainmedic.common.errors import BrokerError
from trainmedic.local import broker_auth, broker_nodes, broker_tls, registrar, registrar_http
from trainmedic.local.enrollments import MAX_BODY, Accepted, Enrollments, Refused, check_join
from trainmedic.recovery import keyring
from trainmedic.recovery.join_token import NODE_FILES, make_token, public_key_model
from trainmedic.recovery.signing import TrustedKeys, generate
from trainmedic.schemas import NodeEnrolled, NodeRegistered, NodeRemoved, encode

PREFIX = "dep."
CA = b"ca bytes"
OPERATOR = generate()
TRUSTED = TrustedKeys.of(OPERATOR.private.public_key())
COORDINATOR = public_key_model(generate().private.public_key())


def enrolled(node: str, expires: float = 100.0, key=OPERATOR, deployment: str = PREFIX, ts: float = 1.0):
    _, signer = make_token(node, CA, 9443)
    token = public_key_model(signer.private.public_key())
    event = NodeEnrolled(ts=ts, node=node, token=token, expires=expires, coordinators=(COORDINATOR,),
                         deployment=deployment)
    return encode(key.sign(event)), signer


def removed(node: str, key=OPERATOR) -> bytes:
    return encode(key.sign(NodeRemoved(ts=2.0, node=node, reason="retired", deployment=PREFIX)))


def registration(node: str, signer, deployment: str = PREFIX, ts: float = 5.0) -> bytes:
    own = public_key_model(generate().private.public_key())
    return encode(signer.sign(NodeRegistered(ts=ts, node=node, key=own, address="10.0.0.9", gpus=4,
                                             deployment=deployment)))


def state_of(*values: bytes):
    return Enrollments.of(enumerate(values), TRUSTED, PREFIX)


def test_a_registration_with_the_latest_token_is_let_in_once() -> None:
    raw, signer = enrolled("n1")
    state = state_of(raw)
    body = registration("n1", signer)
    verdict = check_join(state, set(), 10.0, body, PREFIX)
    assert isinstance(verdict, Accepted)
    assert verdict.registration.gpus == 4 and verdict.enrollment.coordinators == (COORDINATOR,)
    used = check_join(state, {verdict.enrollment.token.key_id}, 10.0, body, PREFIX)
    assert isinstance(used, Refused) and (used.status, used.kind) == (409, "used")
    assert "without --join" in used.message


def test_refusals_say_what_happened_and_what_to_do() -> None:
    raw, signer = enrolled("n1", expires=50.0)
    state = state_of(raw)
    cases = {
        "expired": check_join(state, set(), 50.0, registration("n1", signer), PREFIX),
        "not_enrolled": check_join(state, set(), 10.0, registration("n2", signer), PREFIX),
        "other_deployment": check_join(state, set(), 10.0, registration("n1", signer, "other."), PREFIX),
        "other_token": check_join(state, set(), 10.0, registration("n1", make_token("n1", CA, 1)[1]), PREFIX),
        "invalid": check_join(state, set(), 10.0, b"{not json", PREFIX),
        "too_large": check_join(state, set(), 10.0, b" " * (MAX_BODY + 1), PREFIX),
    }
    for kind, verdict in cases.items():
        assert isinstance(verdict, Refused) and verdict.kind == kind, (kind, verdict)
    assert "trainmedic nodes enroll n2" in cases["not_enrolled"].message
    assert "expired" in cases["expired"].message
    statuses = {kind: verdict.status for kind, verdict in cases.items()}
    assert statuses == {"expired": 403, "not_enrolled": 403, "other_deployment": 403, "other_token": 403,
                        "invalid": 400, "too_large": 413}


def test_a_used_token_is_said_only_once_its_signature_verified() -> None:
    raw, signer = enrolled("n1")
    forged = registration("n1", signer).replace(b'"gpus":4', b'"gpus":8')
    verdict = check_join(state_of(raw), {signer.key_id}, 10.0, forged, PREFIX)
    assert (verdict.status, verdict.kind) == (403, "bad_signature")


def test_a_registration_is_dated_within_a_minute_of_the_enrollment_and_the_registrars_clock() -> None:
    raw, signer = enrolled("n1", ts=100.0, expires=1000.0)
    state = state_of(raw)
    verdicts = {ts: check_join(state, set(), 200.0, registration("n1", signer, ts=ts), PREFIX)
                for ts in (39.0, 41.0, 259.0, 261.0)}
    assert [isinstance(verdicts[ts], Accepted) for ts in (41.0, 259.0)] == [True, True]
    early, ahead = verdicts[39.0], verdicts[261.0]
    assert (early.status, early.kind, ahead.status, ahead.kind) == (403, "clock", 403, "clock")
    assert "before its enrollment" in early.message and "ahead of the registrar's clock" in ahead.message


def test_a_changed_registration_does_not_verify() -> None:
    raw, signer = enrolled("n1")
    body = registration("n1", signer).replace(b'"gpus":4', b'"gpus":8')
    verdict = check_join(state_of(raw), set(), 10.0, body, PREFIX)
    assert isinstance(verdict, Refused) and verdict.kind == "bad_signature"


def test_only_the_latest_word_counts_and_only_a_trusted_operators() -> None:
    first, old = enrolled("n1")
    second, new = enrolled("n1")
    state = state_of(first, second)
    assert check_join(state, set(), 10.0, registration("n1", old), PREFIX).kind == "other_token"
    assert isinstance(check_join(state, set(), 10.0, registration("n1", new), PREFIX), Accepted)

    state = state_of(second, removed("n1"))
    assert state.removed() == {"n1"}
    assert check_join(state, set(), 10.0, registration("n1", new), PREFIX).kind == "removed"
    third, newest = enrolled("n1")
    state = state_of(second, removed("n1"), third)
    assert state.removed() == set()
    assert isinstance(check_join(state, set(), 10.0, registration("n1", newest), PREFIX), Accepted)

    stranger = generate()
    forged, forged_signer = enrolled("n9", key=stranger)
    elsewhere, _ = enrolled("n8", deployment="other.")
    state = state_of(forged, removed("n1", key=stranger), elsewhere, b"garbage")
    assert state.latest == {} and len(state.refused) == 4
    assert "unknown key id" in state.refused[0][1] and "other deployment" in state.refused[2][1]
    assert check_join(state, set(), 10.0, registration("n9", forged_signer), PREFIX).kind == "not_enrolled"


class Broker:
    """Stands in for broker_nodes' calls to a running broker: a node's principal is its password in
    nodes.json; `failures` of add or remove raise as a broker that does not answer would."""

    def __init__(self, folder: Path) -> None:
        self.dir, self.credentials = folder / "broker", folder / "credentials"
        self.dir.mkdir()
        self.credentials.mkdir()
        self.added: list[tuple[str, bool]] = []
        self.failures = {"add": 0, "remove": 0}

    def passwords(self) -> dict[str, str]:
        return broker_nodes.node_passwords(self)

    def add(self, broker, node, prefixes, out, rotate=False) -> Path:
        self._fail("add")
        self.added.append((node, rotate))
        broker_auth.write_private(self.dir / "nodes.json", json.dumps({**self.passwords(), node: "pw"}))
        out.mkdir(parents=True)
        for name in NODE_FILES:
            (out / name).write_text(name)
        return out

    def remove(self, broker, node) -> bool:
        self._fail("remove")
        passwords = self.passwords()
        passwords.pop(node)
        broker_auth.write_private(self.dir / "nodes.json", json.dumps(passwords))
        return True

    def _fail(self, what: str) -> None:
        if self.failures[what]:
            self.failures[what] -= 1
            raise BrokerError(f"{what}: the broker did not answer")


class Bed:
    """A registrar trusting OPERATOR, on a stand-in broker, whose clock the test sets, fed records."""

    def __init__(self, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.broker = Broker(folder)
        for name in ("add", "remove"):
            monkeypatch.setattr(broker_nodes, name, getattr(self.broker, name))
        pem = OPERATOR.private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
        (folder / "operator.pub").write_bytes(pem)
        keyring.trust_key(folder / "keys", folder / "operator.pub", keyring.OPERATOR, 0.0)
        self.now = 10.0
        self.registrar = registrar.Registrar(self.broker, PREFIX, folder / "keys", clock=lambda: self.now)
        self.published: list[bytes] = []
        self.registrar._producer = SimpleNamespace(send=lambda _, body, key: self.published.append(body),
                                                   flush=lambda _: 0)
        self.offset = 0

    def read(self, *values: bytes) -> None:
        """The registrar reads `values` off the topic (none: a poll that found nothing)."""
        self.registrar._take([SimpleNamespace(offset=self.offset + i, value=v) for i, v in enumerate(values)])
        self.offset += len(values)
        self.registrar._update()


@pytest.fixture
def bed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Bed:
    return Bed(tmp_path, monkeypatch)


def test_a_node_joins_with_a_new_password_and_its_registration_is_published(bed: Bed) -> None:
    raw, signer = enrolled("n1")
    bed.read(raw)
    body = registration("n1", signer)
    status, answer = bed.registrar.join(body, "10.0.0.9")
    assert status == 200 and sorted(answer["files"]) == sorted(NODE_FILES)
    assert bed.broker.added == [("n1", True)] and bed.published == [body]
    assert bed.registrar.join(body, "10.0.0.9")[0] == 409


def test_a_join_for_an_unknown_node_holds_up_no_other_join_and_no_removal(bed: Bed) -> None:
    raw, signer = enrolled("n1")
    gone, _ = enrolled("n2")
    bed.read(raw, gone)
    bed.broker.add(None, "n2", (), bed.broker.dir / "n2")
    unknown = threading.Thread(target=bed.registrar.join, args=(registration("ghost", signer), "10.6.6.6"))
    unknown.start()  # waits up to CATCH_UP_S for the ghost's enrollment
    time.sleep(0.3)
    started = time.monotonic()
    assert bed.registrar.join(registration("n1", signer), "10.0.0.9")[0] == 200
    bed.read(removed("n2"))
    took = time.monotonic() - started
    unknown.join()
    assert took < 1.0 and "n2" not in bed.broker.passwords()


def test_a_failed_deletion_is_tried_at_every_read_and_said_once_a_minute(
        bed: Bed, caplog: pytest.LogCaptureFixture) -> None:
    raw, signer = enrolled("n1")
    bed.read(raw)
    assert bed.registrar.join(registration("n1", signer), "10.0.0.9")[0] == 200
    bed.broker.failures["remove"] = 3
    with caplog.at_level(logging.INFO, "trainmedic.registrar"):
        bed.read(removed("n1"))
        bed.now = 40.0
        bed.read()
        said = [r for r in caplog.records if r.levelno == logging.ERROR]
        bed.now = 71.0
        bed.read()
        assert "n1" in bed.broker.passwords()
        bed.read()
    assert len(said) == 1 and "could not delete the principal of removed node n1" in said[0].getMessage()
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 2
    assert "n1" not in bed.broker.passwords()
    assert any("node n1 removed by the operator" in r.getMessage() for r in caplog.records)


def test_the_token_is_spent_before_the_node_is_added(bed: Bed) -> None:
    raw, signer = enrolled("n1")
    bed.read(raw)
    bed.broker.failures["add"] = 1
    body = registration("n1", signer)
    status, answer = bed.registrar.join(body, "10.0.0.9")
    assert status == 503 and "token is spent" in answer["error"] and "nodes enroll n1" in answer["error"]
    used = json.loads((bed.broker.dir / registrar.JOINS_FILE).read_text())["used"]
    assert [entry["node"] for entry in used.values()] == ["n1"]
    assert bed.registrar.join(body, "10.0.0.9")[0] == 409 and bed.published == []


def test_a_failure_is_told_by_its_id_its_detail_only_logged(
        bed: Bed, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def broken(*_) -> None:
        raise RuntimeError("detail for the log only: /srv/secret")

    monkeypatch.setattr(registrar, "check_join", broken)
    bed.read()
    status, answer = registrar_http.answered("/join", bed.registrar.join, b"{}", "10.6.6.6")
    logged = [r for r in caplog.records if r.exc_info]
    assert status == 500 and "/srv/secret" not in answer["error"]
    error = answer["error"].split("(error ")[1].split(")")[0]
    assert len(logged) == 1 and error in logged[0].getMessage() and "/srv/secret" in caplog.text


@pytest.fixture
def https(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A registrar's HTTPS front serving 2 connections at once, each 1.5 s in all; and its CA."""
    now = dt.datetime.now(dt.UTC)
    ca_key, ca = broker_tls.new_ca(now)
    key, cert = broker_tls.new_cert(ca_key, ca, ["127.0.0.1"], now)
    (tmp_path / "cert.pem").write_bytes(cert)
    (tmp_path / "key.pem").write_bytes(key)
    monkeypatch.setattr(registrar_http, "DEADLINE_S", 1.5)
    context = registrar_http.tls_context(tmp_path / "cert.pem", tmp_path / "key.pem")
    server = registrar_http.RegistrarServer(("127.0.0.1", 0), context, ca,
                                            {"/join": lambda body, peer: (200, {})}, lambda: (200, {}),
                                            max_connections=2)
    registrar_http.serve_in_thread(server)
    yield server, ca
    server.shutdown()
    server.server_close()


def connect(server, ca: bytes) -> ssl.SSLSocket:
    context = ssl.create_default_context(cadata=ca.decode())
    return context.wrap_socket(socket.create_connection(server.server_address, timeout=5),
                               server_hostname="127.0.0.1")


def test_connections_beyond_the_cap_are_closed_at_once(https) -> None:
    server, ca = https
    held = [connect(server, ca), connect(server, ca)]
    time.sleep(0.2)
    with pytest.raises(OSError):
        beyond = connect(server, ca)
        beyond.sendall(b"GET /ca HTTP/1.0\r\n\r\n")
        assert beyond.recv(100)  # b"": closed unanswered
    held.pop().close()
    time.sleep(0.2)
    with connect(server, ca) as again:
        again.sendall(b"GET /ca HTTP/1.0\r\n\r\n")
        assert again.recv(100).startswith(b"HTTP/1.0 200")
    held[0].close()


def test_a_peer_trickling_its_request_is_cut_off_at_the_deadline(https) -> None:
    server, ca = https
    started = time.monotonic()
    with connect(server, ca) as slow:
        slow.sendall(b"POST /join HTTP/1.0\r\n")
        closed = False
        while not closed and time.monotonic() - started < 6:
            try:
                slow.sendall(b"X-Slow: 1\r\n")  # each read is well within its own timeout
                closed = bool(select.select([slow], [], [], 0.3)[0]) and slow.recv(100) == b""
            except OSError:  # reset: closed too
                closed = True
    assert closed and time.monotonic() - started < 3
