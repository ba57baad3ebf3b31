"""One error hierarchy for trainmedic: what went wrong, and whether trying again can help."""

from __future__ import annotations


class TrainmedicError(Exception):
    """Root of every error trainmedic raises on purpose. The message says what to do."""

    retryable = False


class ConfigError(TrainmedicError):
    """Settings that cannot work (a bad value, a missing key file, an inconsistent pair)."""


class KafkaError(TrainmedicError):
    """A Kafka operation failed. `code` keeps librdkafka's error code name where there is one."""

    def __init__(self, message: str, code: str | None = None, retryable: bool = False) -> None:
        super().__init__(message if code is None else f"{message} [{code}]")
        self.code = code
        self.retryable = retryable


class DeliveryError(KafkaError):
    """A message the broker did not take: never hidden, always raised to the sender."""


class BrokerError(TrainmedicError):
    """The local broker could not be set up, started or stopped."""
