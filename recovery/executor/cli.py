"""Run this node's executor: apply signed commands to the job ranks on this node.

The executor reads only its own node's partition of the commands topic (the partition
its node name hashes to, as the producer's partitioner does), checks each command's
signature, target node, freshness and generation, applies it at most once (applied ids
are kept in STATE_DIR/ledger.jsonl), and acks it on the acks topic: accepted, then done
or failed; or refused, with the reason. It launches each rank as its own process group
with the torch.distributed environment, stops ranks with SIGTERM then SIGKILL, sends
SIGUSR1 for `reattempt`, and reports every rank exit on telemetry.worker. On SIGTERM or
Ctrl-C it stops its ranks and exits. Rank output goes to STATE_DIR/logs/JOB/.

Environment: TRAINMEDIC_CLUSTER_KEY_FILE or TRAINMEDIC_CLUSTER_KEY (the cluster key),
TRAINMEDIC_NODE (default --node), TRAINMEDIC_KAFKA_BOOTSTRAP, TRAINMEDIC_TOPIC_PREFIX,
TRAINMEDIC_KAFKA_CONFIG, TRAINMEDIC_HOME. See docs/executor.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

from bus.errors import TrainmedicError
from bus.metrics_flag import add_metrics_argument
from bus.signals import stop_on_signals


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    node = os.environ.get("TRAINMEDIC_NODE")
    parser.add_argument("--node", default=node, required=node is None,
                        help="this node's name, as commands address it (env TRAINMEDIC_NODE)")
    parser.add_argument("--state-dir", help="ledger, rank logs and snapshots "
                        "(default $TRAINMEDIC_HOME/executor/NODE)")
    parser.add_argument("--freshness-s", type=float, default=60.0,
                        help="refuse commands whose ts is further than this from now (default 60)")
    parser.add_argument("--stop-grace-s", type=float, default=10.0,
                        help="seconds between SIGTERM and SIGKILL when stopping ranks (default 10)")
    parser.add_argument("--insecure", action="store_true",
                        help="accept unsigned commands (no cluster key); for local experiments only")
    parser.add_argument("--cold-start", action="store_true",
                        help="start every rank as a new interpreter instead of forking it warm")
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP)")
    add_metrics_argument(parser)


def run(args: argparse.Namespace) -> int:
    import logging

    from pydantic import ValidationError

    from bus.metrics import serve_metrics
    from bus.settings import KafkaSettings, home
    from recovery.executor.config import ExecutorConfig
    from recovery.executor.service import Executor
    from recovery.signing import load_key

    log = logging.getLogger("trainmedic.executor")
    try:
        key = None if args.insecure else load_key()
        config = ExecutorConfig(
            node=args.node, state_dir=args.state_dir or home() / "executor" / args.node,
            freshness_s=args.freshness_s, stop_grace_s=args.stop_grace_s, key=key,
            insecure=args.insecure, warm_start=not args.cold_start,
        )
        kafka = KafkaSettings.from_env(bootstrap=args.bootstrap)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        print(f"trainmedic executor: {first['msg'].removeprefix('Value error, ')}", file=sys.stderr)
        return 2
    except TrainmedicError as err:
        print(f"trainmedic executor: {err}", file=sys.stderr)
        return 2
    if config.insecure:
        log.warning("INSECURE: unsigned commands will be applied; anyone who can write to %s "
                    "can start and stop processes on this node", kafka.topics.commands)
    stop = threading.Event()
    serve_metrics(args.metrics_port)
    try:
        with stop_on_signals(stop):
            Executor(config, kafka).run(stop)
    except TrainmedicError as err:
        print(f"trainmedic executor: {err}", file=sys.stderr)
        return 1
    return 0
