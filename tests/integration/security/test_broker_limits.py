"""The local broker protects itself, on a broker of this module's own (own home, own ports): its
folder is its owner's only (an older 0755 one is fixed at start), a telemetry writer's burst is
throttled by its quota while the admin's is not, and a flood of unauthenticated connections from
one address is cut at `max.connections.per.ip` while the broker serves an authenticated client."""

from __future__ import annotations

import errno
import json
import selectors
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainmedic.bus.admin import create_topics, list_topics
from trainmedic.bus.clients import producer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.signals import alive
from trainmedic.local.broker import LocalBroker
from trainmedic.local.broker_limits import QUOTAS, Quota
from trainmedic.local.cluster import free_port_pair

pytestmark = pytest.mark.kafka

MiB = 1 << 20
AGENT = Quota(producer_byte_rate=1 * MiB, consumer_byte_rate=1 * MiB)  # small, so a short burst shows it
BURST = 16 * MiB  # Kafka measures a rate over an 11 s window: ~10 s of the quota pass unthrottled


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    home = tmp_path_factory.mktemp("limits")
    local = LocalBroker(home, port=free_port_pair(), quotas={**QUOTAS, "agent": AGENT})
    local.start(prefixes=("limits.",))
    try:
        yield local
    finally:
        local.stop()


def settings(broker: LocalBroker, role: str) -> KafkaSettings:
    return KafkaSettings.from_env({"TRAINMEDIC_CREDENTIALS_DIR": str(broker.credentials)}, role=role,
                                  bootstrap=f"127.0.0.1:{broker.port}", topic_prefix="limits.")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_broker_folder_is_its_owners_only_and_an_older_one_is_fixed(broker: LocalBroker) -> None:
    data = broker.dir / "data"
    assert (mode(broker.dir), mode(data), mode(broker.log_file)) == (0o700, 0o700, 0o600)
    broker.stop()
    broker.dir.chmod(0o755)  # as a broker made before this left it
    data.chmod(0o755)
    broker.log_file.chmod(0o644)
    broker.start()
    assert (mode(broker.dir), mode(data), mode(broker.log_file)) == (0o700, 0o700, 0o600)
    create_topics(settings(broker, "admin"), partitions=1)
    deadline = time.monotonic() + 10.0
    while not (made := [p for p in data.iterdir() if p.name.startswith("limits.")]):
        assert time.monotonic() < deadline, f"no topic folder in {sorted(p.name for p in data.iterdir())}"
        time.sleep(0.1)
    assert {mode(p) for p in made} == {0o700}  # what the broker writes: umask 077
    assert {mode(p) for p in made[0].iterdir()} == {0o600}


def test_every_principal_has_its_quota(broker: LocalBroker) -> None:
    found = broker.described_quotas(json.loads(broker.secrets_file.read_text())["admin"])
    assert found == {user: {"producer_byte_rate": float(q.producer_byte_rate),
                            "consumer_byte_rate": float(q.consumer_byte_rate)}
                     for user, q in {**QUOTAS, "agent": AGENT}.items()}


def burst(settings: KafkaSettings, topic: str) -> tuple[float, int]:
    """Seconds to deliver BURST bytes in 64 KiB records, and how many throttle notices came back."""
    throttled, failed = [], []
    client = producer(settings, {"linger.ms": 5, "throttle_cb": lambda event: throttled.append(event),
                                 "queue.buffering.max.kbytes": 65536,
                                 "on_delivery": lambda err, _: err is not None and failed.append(err)})
    value = b"x" * (64 * 1024)
    began = time.monotonic()
    for _ in range(BURST // len(value)):
        while True:
            try:
                client.produce(topic, value)
                break
            except BufferError:
                client.poll(0.05)
        client.poll(0)
    assert client.flush(60.0) == 0, "the burst was not delivered within 60 s"
    assert not failed, failed[:3]
    return time.monotonic() - began, len(throttled)


def test_a_telemetry_writers_burst_is_throttled_the_admins_is_not(broker: LocalBroker) -> None:
    admin, agent = settings(broker, "admin"), settings(broker, "agent")
    create_topics(admin, partitions=1)
    free_s, free_notices = burst(admin, admin.topics.gpu)
    bound_s, notices = burst(agent, agent.topics.gpu)
    free_rate, bound_rate = BURST / free_s / MiB, BURST / bound_s / MiB
    print(f"admin {free_rate:.1f} MiB/s, agent {bound_rate:.1f} MiB/s ({notices} throttle notices)")
    assert free_notices == 0 and notices > 0
    # 16 MiB at 1 MiB/s, ~10 s of it allowed at once: at least ~6 s; the admin's takes well under that
    assert bound_s >= 4.0 and bound_rate < 4.0 and free_rate > 3 * bound_rate


def test_a_connection_flood_is_cut_per_address_and_the_broker_serves_on(broker: LocalBroker) -> None:
    cap = broker.connections.per_ip
    flood = cap + 100
    opened: list[socket.socket] = []
    try:
        for _ in range(flood):  # from 127.0.0.2: another address than the clients' 127.0.0.1
            sock = socket.create_connection(("127.0.0.1", broker.port), timeout=5.0,
                                            source_address=("127.0.0.2", 0))
            opened.append(sock)
        closed = closed_by_broker(opened, want=flood - cap, timeout_s=30.0)
        assert closed == flood - cap, f"{closed} of {flood} connections closed; the cap is {cap}"
        state = broker.state()
        assert state is not None and alive(state.pid)
        admin = settings(broker, "admin")
        assert admin.topics.gpu in list_topics(admin)  # a new authenticated client, while the flood holds
        client = producer(admin, {})
        client.produce(admin.topics.gpu, b"still serving")
        assert client.flush(10.0) == 0
    finally:
        for sock in opened:
            sock.close()


def closed_by_broker(sockets: list[socket.socket], want: int, timeout_s: float) -> int:
    """How many of `sockets` the broker closed (end of stream or reset), waiting until `want` were
    or `timeout_s` passed, and then a second more for any beyond `want`."""
    closed = 0
    with selectors.DefaultSelector() as selector:
        for sock in sockets:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.5):
                try:
                    data = key.fileobj.recv(1)
                except OSError as err:
                    data = b"" if err.errno in (errno.ECONNRESET, errno.EPIPE) else None
                if data == b"":
                    selector.unregister(key.fileobj)
                    closed += 1
            if closed >= want:
                deadline = min(deadline, time.monotonic() + 1.0)
    return closed
