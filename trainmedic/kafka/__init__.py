"""Thin typed wrappers over confluent-kafka: a producer of events, a validating consumer, admin."""

from trainmedic.kafka.admin import create_topics, list_topics, wait_for_broker, wait_for_topics
from trainmedic.kafka.consumer import EventConsumer, Record, parse_message
from trainmedic.kafka.producer import EventProducer

__all__ = [
    "EventConsumer", "EventProducer", "Record", "create_topics", "list_topics", "parse_message",
    "wait_for_broker", "wait_for_topics",
]
