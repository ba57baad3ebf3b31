"""Run this node's executor: apply signed commands to the job ranks on this node.

The executor reads only its own node's partition of the commands topic (the partition
its node name hashes to, as the producer's partitioner does), checks each command's
signature, target node, freshness and generation, applies it at most once (applied ids
are kept in STATE_DIR/ledger.jsonl), and acks it on the acks topic: accepted, then done
or failed; or refused, with the reason. It launches each rank as its own process group
with the torch.distributed environment, stops ranks with SIGTERM then SIGKILL, sends
SIGUSR1 for `reattempt`, and reports every rank exit on telemetry.worker. On SIGTERM or
Ctrl-C it stops its ranks and exits. A job's ranks keep their files in JOBS_DIR/JOB/ (output
in logs/, snapshots in snapshots/; it is their HOME), outside TRAINMEDIC_HOME, and run as the
--run-as user when given (the executor then runs as root); without one they run as the
executor's own user, which is warned about at start.

Only commands the admission policy allows are run (--allowed-*: by default the demo's
module under this interpreter); any other is acked refused with the rule it broke. Ranks
get an allow-listed environment: never the cluster key nor any Kafka setting; their hook
reports to this executor's Unix socket, and the executor publishes what concerns the rank
that speaks, at its own time.

Every option can also be set by its variable (TRAINMEDIC_EXECUTOR_*, e.g.
TRAINMEDIC_EXECUTOR_NODE) or in the --config YAML file (keys: the option's name with
underscores). Commands must be signed by a key whose public half (ID.pub) is in --keys-dir
(default $TRAINMEDIC_HOME/keys; copy the coordinator's *.pub there, see `trainmedic keys`),
and every ack is signed with this node's own key from that folder (`trainmedic keys generate
--node NODE`, its ID.pub trusted by the coordinator for NODE only); --insecure accepts
unsigned commands and sends unsigned acks instead, and cannot be combined with --keys-dir.
Environment besides: TRAINMEDIC_KAFKA_BOOTSTRAP, TRAINMEDIC_TOPIC_PREFIX,
TRAINMEDIC_KAFKA_CONFIG, TRAINMEDIC_HOME. See docs/executor.md and docs/security.md.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

from trainmedic.bus.config import Options, Section
from trainmedic.bus.errors import TrainmedicError
from trainmedic.bus.metrics_flag import add_metrics_argument
from trainmedic.bus.signals import stop_on_signals
from trainmedic.recovery.executor.config import ExecutorConfig

# The trusted keys, the node's key and the ranks' user are looked up; the poll is an internal tick.
EXECUTOR = Section(ExecutorConfig, env="EXECUTOR", skip=("trusted", "node_key", "rank_user", "poll_s"))
OPTIONS = Options(EXECUTOR)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    OPTIONS.add_to(parser)
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP)")
    add_metrics_argument(parser)


def build_config(options: Options, section: Section, args: argparse.Namespace, **computed) -> ExecutorConfig:
    """The executor's config: the trusted keys and the node's own key loaded from the keys folder
    unless insecure, the keys folder and the state dir under TRAINMEDIC_HOME and the jobs' directories
    beside it unless given, the ranks' user looked up. Warns, once, when ranks would run as the
    executor's own user."""
    import logging
    import os
    import pwd

    from trainmedic.bus.settings import home
    from trainmedic.recovery import keyring
    from trainmedic.recovery.executor.job_dirs import SHARED_USER_WARNING, RankUser, default_root

    keyring.refuse_legacy()
    config = options.build(
        section, args, **computed,
        state_dir=lambda values: home() / "executor" / str(values.get("node")),
        jobs_dir=lambda values: default_root(home()) / str(values.get("node")),
        rank_user=lambda values: (None if values.get("run_as") is None
                                  else RankUser.named(str(values["run_as"]), os.geteuid())),
        keys_dir=lambda values: None if values.get("insecure") is True else keyring.default_dir(),
        trusted=lambda values: (None if values.get("insecure") is True
                                else keyring.load_trusted(Path(values["keys_dir"]))),
        node_key=lambda values: (None if values.get("insecure") is True or not values.get("node")
                                 else keyring.load_signing(Path(values["keys_dir"]),
                                                           keyring.node_role(str(values["node"])))),
    )
    if config.rank_user is None:
        own = pwd.getpwuid(os.geteuid()).pw_name
        logging.getLogger("trainmedic.executor").warning(SHARED_USER_WARNING, own)
    return config


def run(args: argparse.Namespace) -> int:
    import logging

    from trainmedic.bus.metrics import serve_metrics
    from trainmedic.bus.settings import KafkaSettings
    from trainmedic.recovery.executor.command_loop import Executor

    log = logging.getLogger("trainmedic.executor")
    try:
        config = build_config(OPTIONS, EXECUTOR, args)
        kafka = KafkaSettings.from_env(role="executor", bootstrap=args.bootstrap)
    except TrainmedicError as err:
        print(f"trainmedic executor: {err}", file=sys.stderr)
        return 2
    if config.insecure:
        log.warning("INSECURE: command signatures are NOT checked; anyone who can write to %s "
                    "can start and stop processes on this node", kafka.topics.commands)
    else:
        log.info("commands must be signed by one of the keys %s; acks signed with node key %s (from %s)",
                 config.trusted, config.node_key.key_id, config.keys_dir)
    stop = threading.Event()
    serve_metrics(args.metrics_port, args.metrics_host)
    try:
        with stop_on_signals(stop):
            Executor(config, kafka).run(stop)
    except TrainmedicError as err:
        print(f"trainmedic executor: {err}", file=sys.stderr)
        return 1
    return 0
