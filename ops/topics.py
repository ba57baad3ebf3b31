"""Create every trainmedic topic that is missing, or list the deployment's topics as the broker has them
(docs/security.md#broker-authentication-and-acls).

`create` runs as the admin and also grants every role its ACLs for the prefix where the broker has
an authorizer. `list` shows each contract topic under the prefix (--prefix, TRAINMEDIC_TOPIC_PREFIX,
else the newest `trainmedic run`'s) with its key, partitions, retention and whether it exists, then
the topics the services made for themselves (`<prefix>detector-…`).
"""

from __future__ import annotations

import argparse

from trainmedic.bus.admin import create_topics, describe_topics, grant_roles
from trainmedic.bus.settings import KafkaSettings
from trainmedic.ops.prologue import operator_settings, run_command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = sub.add_parser("create", help="create the topics that are missing")
    create.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP)")
    create.add_argument("--prefix", help="topic prefix (env TRAINMEDIC_TOPIC_PREFIX, default trainmedic.)")
    create.add_argument("--partitions", type=int, help="override every topic's default partition count")
    create.add_argument("--replication-factor", type=int, default=-1,
                        help="replicas per partition (default: the broker's default)")
    listing = sub.add_parser("list", help="print each of the deployment's topics: key, partitions, "
                             "retention, and whether it exists on the broker")
    listing.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP)")
    listing.add_argument("--prefix", help="topic prefix (env TRAINMEDIC_TOPIC_PREFIX, default trainmedic.)")


def run(args: argparse.Namespace) -> int:
    return run_command("topics", _run, args)


def _run(args: argparse.Namespace) -> int:
    # `list` shows the newest `trainmedic run`'s topics when nothing names a prefix; `create` makes the
    # default deployment's, as it always has (a run creates its own).
    settings = operator_settings(args, role="admin", from_run=args.action == "list")
    if args.action == "list":
        print_topics(settings, describe_topics(settings))
        return 0
    result = create_topics(settings, partitions=args.partitions, replication_factor=args.replication_factor)
    granted = grant_roles(settings, settings.topic_prefix)
    for name, outcome in result.items():
        print(f"{outcome:8} {name}")
    print("no ACLs: the broker has no authorizer" if granted is None
          else f"granted  {granted} ACLs to the roles for {settings.topic_prefix}*")
    return 0


def print_topics(settings: KafkaSettings, on_broker: dict[str, int]) -> None:
    """One line per topic; `on_broker` maps the broker's topic names to their partition counts."""
    topics = settings.topics
    for name, spec in topics.all().items():
        keep = "forever" if spec.retention_ms < 0 else f"{spec.retention_ms // 86_400_000}d"
        state = f"created, {on_broker[name]} partitions" if name in on_broker else "missing"
        print(f"{name:40} key={spec.key:16} partitions={spec.partitions:<3} retention={keep:8} {state}")
    for name in topics.internal(set(on_broker)):
        print(f"{name:40} internal{'':58} created, {on_broker[name]} partitions")
