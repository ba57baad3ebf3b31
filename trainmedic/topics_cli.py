"""Create every trainmedic topic that is missing, with its partitions, retention and cleanup policy."""

from __future__ import annotations

import argparse
import sys

from bus.errors import TrainmedicError
from bus.settings import KafkaSettings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = sub.add_parser("create", help="create the topics that are missing")
    create.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP)")
    create.add_argument("--partitions", type=int, help="override every topic's default partition count")
    create.add_argument("--replication-factor", type=int, default=-1,
                        help="replicas per partition (default: the broker's default)")
    sub.add_parser("list", help="print each topic with its key, partitions and retention")


def run(args: argparse.Namespace) -> int:
    try:
        settings = KafkaSettings.from_env(bootstrap=getattr(args, "bootstrap", None))
        if args.action == "list":
            for name, spec in settings.topics.all().items():
                keep = "forever" if spec.retention_ms < 0 else f"{spec.retention_ms // 86_400_000}d"
                print(f"{name:32} key={spec.key:16} partitions={spec.partitions:<3} retention={keep}")
            return 0
        from bus.admin import create_topics

        result = create_topics(settings, partitions=args.partitions,
                               replication_factor=args.replication_factor)
    except TrainmedicError as err:
        print(f"trainmedic topics: {err}", file=sys.stderr)
        return 1
    for name, outcome in result.items():
        print(f"{outcome:8} {name}")
    return 0
