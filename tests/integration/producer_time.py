"""Telemetry topics stamped by their producers again, for tests that place messages in time.

Telemetry topics carry the broker's clock (log-append time, docs/security.md "Time is the
broker's"); a test of reading by time sets a message's timestamp itself, as topics created
before that did."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from trainmedic.bus.settings import KafkaSettings


def producer_stamped(settings: KafkaSettings) -> None:
    """This deployment's telemetry topics take the timestamp their producer sets (CreateTime)."""
    entry = [ConfigEntry("message.timestamp.type", "CreateTime", incremental_operation=AlterConfigOpType.SET)]
    resources = [ConfigResource(ResourceType.TOPIC, name, incremental_configs=entry)
                 for name in (settings.topics.gpu, settings.topics.node, settings.topics.worker)]
    admin = AdminClient(settings.client_config())  # alive until the futures are done
    for future in admin.incremental_alter_configs(resources).values():
        future.result()
