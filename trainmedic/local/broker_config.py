"""What the local broker is started with: its server.properties (a KRaft broker and controller, a
single node or a member of a cluster, on loopback unless told otherwise), its log4j settings, and the
id a new cluster's storage is formatted with. Pure: text out, nothing written.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainmedic.common.errors import ConfigError
from trainmedic.local import broker_auth, broker_limits, broker_tls
from trainmedic.local.broker_limits import Connections
from trainmedic.local.broker_listen import Listener


@dataclass(frozen=True)
class Replication:
    """Copies of each partition, and how many must hold a write before acks=all acknowledges it."""

    factor: int
    min_insync: int


SINGLE = Replication(factor=1, min_insync=1)
REPLICATED = Replication(factor=3, min_insync=2)  # a cluster: one member may be down and writes go on


@dataclass(frozen=True)
class Quorum:
    """This node's id, every controller of the cluster (controller.quorum.voters, `ID@HOST:PORT,...`),
    and the replication the broker gives topics by default."""

    node_id: int
    voters: str
    replication: Replication


def cluster_id(random_bytes: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A new KRaft cluster id: 16 random bytes in URL-safe base64. One in 64 would begin with '-',
    which kafka-storage reads as an option and refuses; like Kafka's own Uuid.randomUuid, draw again."""
    while True:
        drawn = base64.urlsafe_b64encode(random_bytes()).decode().rstrip("=")
        if not drawn.startswith("-"):
            return drawn


def server_properties(data: Path, listener: Listener | int, controller_port: int | None = None,
                      passwords: dict[str, str] | None = None, connections: Connections | None = None,
                      tls: broker_tls.Stores | None = None, quorum: Quorum | None = None) -> str:
    """A KRaft broker+controller at `listener` (a port: loopback's, the controller at `controller_port`):
    a single node with replication factors of one, or a member of the `quorum`'s cluster; SASL and the
    authorizer with the roles' `passwords`, plain without; TLS from the `tls` stores on a TLS listener;
    `connections` capped."""
    if isinstance(listener, int):
        listener = Listener(port=listener, controller_port=controller_port or 0)
    if listener.tls and (passwords is None or tls is None):
        raise ConfigError("a TLS listener needs the roles' passwords (not --insecure) and the TLS files")
    protocol = listener.protocol(passwords is not None)
    limits = broker_limits.connection_properties(connections or Connections(), protocol)
    quorum = quorum or Quorum(1, f"1@{listener.voter}", SINGLE)
    copies = quorum.replication
    # A cluster: a member killed moves its partitions' leaders once the controller misses it for
    # broker.session.timeout.ms; Kafka's 9 s kept every client of those partitions waiting, the
    # detector blind (docs/deployment.md, fault (e)). 3 s, with a heartbeat every second.
    min_insync = (f"min.insync.replicas={copies.min_insync}\nbroker.session.timeout.ms=3000\n"
                  "broker.heartbeat.interval.ms=1000\n" if copies.factor > 1 else "")
    return f"""\
process.roles=broker,controller
node.id={quorum.node_id}
controller.quorum.voters={quorum.voters}
controller.listener.names=CONTROLLER
{broker_auth.listener_properties(listener, passwords)}{broker_tls.properties(tls) if listener.tls else ""}\
log.dirs={data}
num.partitions=1
default.replication.factor={copies.factor}
{min_insync}offsets.topic.replication.factor={copies.factor}
offsets.topic.num.partitions=10
transaction.state.log.replication.factor={copies.factor}
transaction.state.log.min.isr={copies.min_insync}
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
log.segment.bytes=67108864
num.network.threads=2
num.io.threads=2
background.threads=2
{limits}"""


LOG4J = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka=INFO
log4j.logger.org.apache.kafka=WARN
log4j.logger.kafka.server.KafkaServer=INFO
"""
