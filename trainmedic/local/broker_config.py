"""What the local broker is started with: its server.properties (a single-node KRaft broker and
controller on loopback), its log4j settings, and the id a new cluster's storage is formatted with.
Pure: text out, nothing written.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from pathlib import Path

from trainmedic.local import broker_auth, broker_limits
from trainmedic.local.broker_limits import Connections


def cluster_id(random_bytes: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A new KRaft cluster id: 16 random bytes in URL-safe base64. One in 64 would begin with '-',
    which kafka-storage reads as an option and refuses; like Kafka's own Uuid.randomUuid, draw again."""
    while True:
        drawn = base64.urlsafe_b64encode(random_bytes()).decode().rstrip("=")
        if not drawn.startswith("-"):
            return drawn


def server_properties(data: Path, port: int, controller_port: int, passwords: dict[str, str] | None = None,
                      connections: Connections | None = None) -> str:
    """A single-node KRaft broker+controller on loopback with replication factors of one; SASL and
    the authorizer with the roles' `passwords`, plain without; `connections` capped."""
    listener = "SASL_PLAINTEXT" if passwords is not None else "PLAINTEXT"
    limits = broker_limits.connection_properties(connections or Connections(), listener)
    return f"""\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller_port}
controller.listener.names=CONTROLLER
{broker_auth.listener_properties(port, controller_port, passwords)}log.dirs={data}
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
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
