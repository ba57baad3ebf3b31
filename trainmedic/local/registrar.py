"""The registrar, on the broker's host (`trainmedic broker registrar`): it follows the deployment's
`nodes` topic, believing the enrollments and removals an operator key trusted here signed, and
serves HTTPS (registrar_http) where an enrolled node redeems its join token once: the token is marked
used (joins.json), then the node gets its own principal with a new password and its folder
(broker_nodes.add), and its registration is published on `acks` for the coordinator. A node removed
loses its principal within a second of the record; a deletion that fails is tried at every read of the
topic until it is done (docs/security.md, "One identity per node").
"""

from __future__ import annotations

import json
import logging
import os
import signal
import tempfile
import threading
import time
from base64 import b64encode
from collections.abc import Callable
from pathlib import Path

from trainmedic.bus import acls
from trainmedic.bus.addresses import host_port, split_host_port
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.reader import EARLIEST, TopicReader
from trainmedic.bus.settings import KafkaSettings, credentials_dir, home
from trainmedic.common.errors import ConfigError, TrainmedicError
from trainmedic.local import broker_auth, broker_nodes
from trainmedic.local.broker import LocalBroker
from trainmedic.local.enrollments import Accepted, Enrollments, Refused, check_join
from trainmedic.local.host_door import HostDoor
from trainmedic.local.registrar_http import RegistrarServer, serve_in_thread, tls_context
from trainmedic.recovery import keyring
from trainmedic.recovery.join_token import NODE_FILES
from trainmedic.recovery.key_folders import KeyFolder
from trainmedic.recovery.signing import TrustedKeys
from trainmedic.schemas.printable import terminal_safe

log = logging.getLogger("trainmedic.registrar")

DEFAULT_PORT = 9443
JOINS_FILE = "joins.json"  # under HOME/broker: the token key ids used, never to be used again
POLL_S = 0.25  # the nodes topic is read this often: a removal is applied within about a second
CATCH_UP_S = 3.0  # a join for a node not known yet waits this long for the reader (an enrollment in flight)
ERROR_EVERY_S = 60.0  # a principal that cannot be deleted is tried at every read, said this often at most


def operator_keys(directory: Path) -> TrustedKeys:
    """The operator keys trusted in `directory`, maybe none."""
    return keyring.load_roles(directory).get(keyring.OPERATOR, TrustedKeys({}))


class UsedTokens:
    """The join tokens used (by their key id) and the node each joined, in a 0600 file replaced whole.
    `used` is replaced, never changed in place, so that `ids` may be read while a join adds one."""

    def __init__(self, path: Path) -> None:
        self._path = path
        try:
            self.used: dict[str, dict] = json.loads(path.read_text()).get("used", {})
        except FileNotFoundError:
            self.used = {}

    def ids(self) -> frozenset[str]:
        return frozenset(self.used)

    def add(self, key_id: str, node: str, now: float) -> None:
        used = {**self.used, key_id: {"node": node, "at": now}}
        tmp = self._path.with_name(self._path.name + ".tmp")
        broker_auth.write_private(tmp, json.dumps({"used": used}, indent=2))
        os.replace(tmp, self._path)
        self.used = used


class Registrar:
    """The registrar's state and its two jobs: `follow` the nodes topic, `join` a node. The admission
    of a node and the deletion of a principal happen one at a time (`_joining`); the checks before an
    admission, and the wait for an enrollment in flight, hold no lock."""

    def __init__(self, broker: LocalBroker, prefix: str, keys_dir: Path,
                 clock: Callable[[], float] = time.time) -> None:
        self.broker = broker
        self.prefix = prefix
        self.keys_dir = keys_dir
        self.settings = KafkaSettings.from_env({"TRAINMEDIC_CREDENTIALS_DIR": str(broker.credentials),
                                                "TRAINMEDIC_TOPIC_PREFIX": prefix}, role=acls.ADMIN)
        self._clock = clock
        self._keys = KeyFolder(keys_dir, TrustedKeys({}), load=operator_keys)
        self._trusted: TrustedKeys | None = None
        self._records: list[tuple[int, bytes | None]] = []
        self._done = 0  # records applied to `state`
        self.state = Enrollments()
        self._seen = threading.Condition()  # guards `state`, notified after every read of the topic
        self._reads = 0
        self._joining = threading.Lock()
        self.hosts = HostDoor(broker.dir, broker.credentials, keys_dir, prefix, self._joining, clock)
        self._used = UsedTokens(broker.dir / JOINS_FILE)
        self._failed: dict[str, float] = {}  # removed node -> when its failed deletion was last logged
        self._producer: EventProducer | None = None

    def reader(self) -> TopicReader:
        topics = self.settings.topics
        return TopicReader(self.settings, [topics.nodes], start=EARLIEST, name=topics.owned("registrar"),
                           timeout_s=30.0)

    def catch_up(self, reader: TopicReader) -> None:
        """Read the topic's backlog, then apply what it says."""
        for batch in reader.batches(poll_s=POLL_S, give_up_s=120.0):
            self._take(batch)
        self._update()

    def follow(self, reader: TopicReader, stop: threading.Event) -> None:
        """Read on until `stop`, applying each change (and a change of the operator keys trusted here)."""
        while not stop.is_set():
            self._take(reader.poll(POLL_S))
            self._update()

    def _take(self, batch: list) -> None:
        self._records.extend((raw.offset, raw.value) for raw in batch)

    def _update(self) -> None:
        """Apply the records read since, then delete the principals removed nodes still hold."""
        trusted = self._keys.trusted()
        with self._seen:
            if trusted is not self._trusted:
                if not trusted.keys:
                    log.error("registrar: no operator key is trusted in %s, so no enrollment is believed "
                              "and every node's join is refused: invite an operator's host (`trainmedic "
                              "broker invite operator`, then `trainmedic join` there)", self.keys_dir)
                self._trusted = trusted
                self.state = Enrollments.of(self._records, trusted, self.prefix)  # all again, by these keys
            else:
                for offset, raw in self._records[self._done:]:
                    self.state.apply(offset, raw, trusted, self.prefix)
            for offset, why in self.state.refused:
                log.warning("registrar: record %s of %s not believed: %s", offset, self.settings.topics.nodes,
                            terminal_safe(why))
            self.state.refused.clear()
            self._done = len(self._records)
            self._reads += 1
            self._seen.notify_all()
            removed = self.state.removed()
        if removed & self._principals():
            with self._joining:
                for node in sorted(removed & self._principals()):
                    self._delete(node)

    def _principals(self) -> set[str]:
        """The nodes that hold a principal on the broker."""
        return set(broker_nodes.node_passwords(self.broker))

    def _delete(self, node: str) -> None:
        """Node `node`'s principal deleted (`_joining` held); when that fails, it is tried again at the
        next read of the topic, and said at most once a minute."""
        try:
            broker_nodes.remove(self.broker, node)
        except TrainmedicError as err:
            now = self._clock()
            if now - self._failed.get(node, -ERROR_EVERY_S) >= ERROR_EVERY_S:
                self._failed[node] = now
                log.error("registrar: could not delete the principal of removed node %s (tried again every "
                          "%gs, said again in a minute): %s", terminal_safe(node), POLL_S, err)
            return
        self._failed.pop(node, None)
        log.info("registrar: node %s removed by the operator: its principal %s and its ACLs deleted",
                 terminal_safe(node), broker_nodes.principal(node))

    def join(self, body: bytes, peer: str) -> tuple[int, dict]:
        """A node's registration, answered: 200 with its folder's files and its coordinators' keys, or
        4xx/5xx with {"error": what happened and what to do} (a failure: registrar_http.answered)."""
        verdict = self._check(body)
        if isinstance(verdict, Refused) and verdict.kind in ("not_enrolled", "other_token"):
            self._wait_for_reads(2)  # an enrollment published a moment ago
            verdict = self._check(body)
        if isinstance(verdict, Accepted):
            with self._joining:
                verdict = self._check(body)  # again: a join with this token, or a removal, came first?
                if isinstance(verdict, Accepted):
                    return self._admit(verdict, body, peer)
        log.warning("registrar: join refused from %s (%s): %s", peer, verdict.kind,
                    terminal_safe(verdict.message))
        return verdict.status, {"error": verdict.message}

    def _admit(self, accepted: Accepted, body: bytes, peer: str) -> tuple[int, dict]:
        """Mark the token used, then give the node its principal and publish its registration
        (`_joining` held). The token is spent first: one lost to a failure beats one usable twice."""
        node = accepted.registration.node
        self._used.add(accepted.enrollment.token.key_id, node, self._clock())
        try:
            files = self._register(accepted, body)
        except TrainmedicError as err:
            log.error("registrar: could not register node %s from %s, and its token is spent: the operator "
                      "must `trainmedic nodes enroll %s` again: %s", terminal_safe(node), peer,
                      terminal_safe(node), err)
            return 503, {"error": f"the registrar could not register node {node!r}, and its token is spent: "
                                  f"ask the operator to run `trainmedic nodes enroll {node}` again"}
        with self._seen:
            current = self.state.latest.get(node)
        if current is not accepted.enrollment:  # removed (or enrolled anew) while it was being added
            self._delete(node)
            return 409, {"error": f"node {node!r} was removed or enrolled again meanwhile: ask the operator"}
        log.info("registrar: node %s joined from %s: principal %s, key %s, address %s, %d GPUs",
                 terminal_safe(node), peer, broker_nodes.principal(node), accepted.registration.key.key_id,
                 terminal_safe(accepted.registration.address), accepted.registration.gpus)
        return 200, {"files": files,
                     "coordinators": [key.model_dump() for key in accepted.enrollment.coordinators]}

    def _check(self, body: bytes) -> Accepted | Refused:
        with self._seen:
            if self._trusted is None or not self._trusted.keys:
                return Refused(503, "no_operator_key", "the registrar trusts no operator key yet, so it "
                               "believes no enrollment: on the broker's host run `trainmedic broker invite "
                               "operator` and join the operator's host with its token (`trainmedic join`)")
            return check_join(self.state, self._used.ids(), self._clock(), body, self.prefix)

    def _wait_for_reads(self, count: int) -> None:
        with self._seen:
            until = self._reads + count
            self._seen.wait_for(lambda: self._reads >= until, CATCH_UP_S)

    def _register(self, accepted: Accepted, body: bytes) -> dict[str, str]:
        """The node's principal made with a new password (whoever held the old one, a host enrolled
        before, loses it) and its folder, its registration (exactly as signed) on `acks`; the folder's
        files in base64."""
        node = accepted.registration.node
        with tempfile.TemporaryDirectory(prefix="trainmedic-join-") as where:
            folder = broker_nodes.add(self.broker, node, (self.prefix,), Path(where) / "node", rotate=True)
            files = {name: b64encode((folder / name).read_bytes()).decode("ascii") for name in NODE_FILES}
        if self._producer is None:
            self._producer = EventProducer(self.settings, client_id=self.settings.topics.owned("registrar"))
        self._producer.send(self.settings.topics.acks, body, key=node)
        self._producer.flush(30.0)
        return files

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10.0)


def serve(listen: str | None, stop: threading.Event | None = None) -> int:
    """`trainmedic broker registrar`: serve at `listen` (HOST:PORT; default the broker's listen host,
    port 9443) until SIGTERM or SIGINT (or `stop`). ConfigError or BrokerError when it cannot."""
    broker = broker_nodes.running(home(), credentials_dir())
    if not broker.listener.tls or broker.ca is None:
        raise ConfigError("the broker runs without TLS: a joining node pins the broker's CA and gets its "
                          "credentials over the registrar's TLS, so enrollment needs a TLS broker "
                          "(`trainmedic broker start --listen ADDR:PORT`, or --tls on loopback)")
    host, port = split_host_port(listen) if listen else (broker.listener.host, DEFAULT_PORT)
    prefix = KafkaSettings.from_env().topic_prefix
    registrar = Registrar(broker, prefix, keyring.default_dir())
    tls = broker.tls_dir
    try:
        posts = {"/join": registrar.join, "/host": registrar.hosts.join}
        server = RegistrarServer((host, port), tls_context(tls / "broker.pem", tls / "broker.key"),
                                 broker.ca.read_bytes(), posts, registrar.hosts.keys)
    except OSError as err:
        raise ConfigError(f"cannot serve on {host_port(host, port)}: {err.strerror or err}") from None
    stop = stop or threading.Event()
    handlers = _stop_on_signals(stop)
    try:
        with registrar.reader() as reader:
            registrar.catch_up(reader)
            serve_in_thread(server)
            log.info("registrar ready on https://%s for deployment %s (nodes join with `trainmedic node "
                     "--join @TOKEN_FILE --bootstrap %s`)", host_port(host, port), prefix, broker.bootstrap)
            registrar.follow(reader, stop)
    finally:
        server.shutdown()
        server.server_close()
        registrar.close()
        for number, handler in handlers.items():
            signal.signal(number, handler)
    log.info("registrar stopped")
    return 0


def _stop_on_signals(stop: threading.Event) -> dict:
    """Set `stop` on SIGTERM and SIGINT (in the main thread only); the handlers before, to put back."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {number: signal.signal(number, lambda *_: stop.set())
            for number in (signal.SIGTERM, signal.SIGINT)}
