"""What the executor sends to Kafka, and how: its node's reports signed for this deployment, every failed
delivery logged and counted, never raised (docs/executor.md, "Poison messages and Kafka errors"): a lost
ack or rank exit is never a reason to stop applying commands or to stop the ranks.
"""

from __future__ import annotations

import logging

from pydantic import BaseModel

from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import KafkaError
from trainmedic.recovery import keyring
from trainmedic.recovery.executor import metrics
from trainmedic.recovery.executor.config import ExecutorConfig
from trainmedic.recovery.key_folders import SigningFolder
from trainmedic.schemas import NodeReport

log = logging.getLogger(__name__)


class NodeProducer:
    """The executor's one producer of acks, node reports, rank exits and dead letters."""

    def __init__(self, config: ExecutorConfig, kafka: KafkaSettings) -> None:
        self._config = config
        # the node's key as its keys folder names it now: a rotation counts from the next report
        self._signer = None if config.node_key is None else SigningFolder(
            config.keys_dir, keyring.node_role(config.node), config.node_key)
        self._topics = kafka.topics
        self.events = EventProducer(kafka, client_id=kafka.topics.owned(f"executor-{config.node}"))

    def report(self, report: NodeReport) -> None:
        """Send a report on the acks topic, signed with this node's key for this deployment (unsigned
        when insecure): the coordinator folds only reports their node's key signed for it."""
        report = report.model_copy(update={"deployment": self._topics.prefix})
        if self._signer is not None:
            report = self._signer.current().sign(report)
        self.send(self._topics.acks, report, key=self._config.node)

    def send(self, topic: str, event: BaseModel, key: str) -> None:
        """Send, or log and count why not: a failed delivery (an earlier one timed out, the queue is
        full) is never a reason to stop applying commands or to stop the ranks."""
        try:
            self.events.send(topic, event, key=key, block_s=1.0)
        except KafkaError as err:
            metrics.SEND_FAILURES.inc()
            log.error("not delivered to Kafka (%s): %s", topic, err)

    def flush(self) -> None:
        """Wait (10 s at most) for what was sent; a failed delivery is logged and counted here too."""
        try:
            self.events.flush(timeout_s=10.0)
        except KafkaError as err:
            metrics.SEND_FAILURES.inc()
            log.error("Kafka delivery failed: %s", err)
