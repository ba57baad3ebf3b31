"""Run the recovery coordinator: rebuild the cluster state from the log, then heal jobs; run two or
more for fail-over. Every option also has a TRAINMEDIC_COORDINATOR_* variable and a --config YAML
key (docs/coordinator.md; keys and what must be signed: docs/security.md).
"""

from __future__ import annotations

import argparse
import logging
import threading

from trainmedic.bus.config import Options, Section
from trainmedic.bus.service_cli import add_service_arguments, exit_with, run_until_stopped
from trainmedic.recovery.coordinator.core.config import CoordinatorConfig

log = logging.getLogger("trainmedic.coordinator")

CONFIG_FORMAT = """\
config file (YAML, every key optional; the flags' names with underscores):
  ack_timeout_s: 30        # per send, for a command's first answer
  done_timeout_s: 600      # from accepted to done
  max_retries: 2           # re-sends of an unanswered command
  mtbf_prior_s: 10800      # the planner's horizon while there is little failure history
  mtbf_prior_weight: 1     # how many failures the prior counts as
  transition_s: 60         # planner default for jobs without one
  tick_s: 1
  isolation_cap: 0.1       # share of the nodes isolated automatically per window (at least one)
  isolation_window_s: 600
  group_window_s: 1.5      # SEV1s this close are planned together (>= heartbeat interval + 0.5)
  restart_backoff_s: [30, 120, 600]  # before a 2nd, 3rd, ... restart (flag repeated; variable "30;120;600")
  max_restarts: 4          # per restart window, then recovery_failed and an alert
  restart_window_s: 3600
  health_check_deadline_s: 120  # a suspect node's health check answered by then, or the node is isolated
  readmission: auto        # re-admit an isolated node on its own (auto), or only by `nodes uncordon` (off)
  readmit_probation_s: 300 # its fault resolved and no incident for this long
  readmit_max_failures: 3  # isolated more often than this within the window: a person decides
  readmit_window_s: 86400
  default_address: null    # address of nodes without one (default: the node id is its host name)
  keys_dir: null           # the command keys (default $TRAINMEDIC_HOME/keys)
  insecure: false
  nodes:                   # the cluster (YAML only): a job naming any other node is rejected
    - {id: n01, switch: leaf-1, address: 10.0.0.1, gpus: 8}
"""

COORDINATOR = Section(CoordinatorConfig, env="COORDINATOR", file_only=("nodes",))
OPTIONS = Options(COORDINATOR)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_service_arguments(parser, OPTIONS, CONFIG_FORMAT)
    parser.add_argument("--migrate-lifecycle", action="store_true",
                        help="copy an older coordinator's decisions from the incidents and nodes topics to "
                        "the recovery topic, once, with every coordinator stopped; then exit")


def build_config(args: argparse.Namespace) -> CoordinatorConfig:
    """The coordinator's config, its keys folder under TRAINMEDIC_HOME unless given or insecure."""
    from trainmedic.recovery import keyring

    keyring.refuse_legacy()
    def keys_dir(values: dict):
        return None if values.get("insecure") is True else keyring.default_dir()

    return OPTIONS.build(COORDINATOR, args, keys_dir=keys_dir)


def load_trust(directory):
    """What the coordinator trusts in `directory` at start: its own keys, the operators', each node's;
    a ConfigError when no operator key is trusted (then no job could ever be started)."""
    from trainmedic.common.errors import ConfigError
    from trainmedic.recovery import keyring
    from trainmedic.recovery.coordinator.provenance import Trust

    trust = Trust.of(keyring.load_roles(directory))
    if not trust.operators.keys:
        raise ConfigError(f"no operator key in {directory}: {keyring.how_to_create(keyring.OPERATOR)} "
                          "here, or trust an operator's public key with `trainmedic keys trust ID.pub "
                          "--role operator` (or pass --insecure to fold unsigned jobs and node events)")
    return trust


def reload_trust(directory):
    """What the running coordinator trusts in `directory`, loaded again (KeyFolder). No operator
    key left (the last one revoked, say stolen) is no error, which would keep it trusted, but an ERROR
    in the log: every job and node event is then refused until one is trusted again."""
    from trainmedic.recovery import keyring
    from trainmedic.recovery.coordinator.provenance import Trust

    trust = Trust.of(keyring.load_roles(directory))
    if not trust.operators.keys:
        log.error("no operator key left in %s: every job and node event is refused until one is trusted "
                  "(`trainmedic keys generate --role operator`, or `trainmedic keys trust ID.pub --role "
                  "operator`)", directory)
    return trust


def load_keys(config: CoordinatorConfig):
    """(signing key, trusted keys as they are now) from the config's keys folder; (None, None) when
    insecure. A configured node without a key is named in a warning: its acks will be dead-lettered."""
    from trainmedic.recovery import keyring
    from trainmedic.recovery.key_folders import KeyFolder

    if config.keys_dir is None:
        return None, None
    signing = keyring.load_signing(config.keys_dir)
    trust = load_trust(config.keys_dir)
    keyless = sorted({node.id for node in config.nodes} - set(trust.owners.values()))
    if keyless:
        log.warning("no key trusted for node(s) %s: their acks will be dead-lettered until `trainmedic keys "
                    "trust NODE.pub --node NAME` adds theirs to %s", ", ".join(keyless[:20]), config.keys_dir)
    return signing, KeyFolder(config.keys_dir, trust, reload_trust).trusted


def run(args: argparse.Namespace) -> int:
    from trainmedic.bus.metrics import serve_metrics
    from trainmedic.bus.settings import KafkaSettings
    from trainmedic.common.errors import ConfigError
    from trainmedic.recovery.coordinator.kafka_adapter import lead
    from trainmedic.recovery.coordinator.rendezvous import rendezvous_root

    if args.migrate_lifecycle:
        return migrate_lifecycle(args)
    try:
        config = build_config(args)
        settings = KafkaSettings.from_env(role="coordinator", bootstrap=args.bootstrap)
        signing, trust = load_keys(config)
    except ConfigError as err:
        return exit_with(2, "coordinator", err)
    if signing is None:
        log.warning("INSECURE: commands are sent UNSIGNED and no signature is checked: anyone who can "
                    "write to %s, %s, %s or %s can start jobs, move nodes, answer commands and restart "
                    "workers, and executors that check signatures will refuse these commands",
                    settings.topics.commands, settings.topics.jobs, settings.topics.nodes,
                    settings.topics.acks)
    else:
        log.info("signing commands with key %s; trusting %s (from %s)", signing.key_id, trust(),
                 config.keys_dir)
    serve_metrics(args.metrics_port, args.metrics_host)
    sign = (lambda command: command) if signing is None else signing.sign

    def coordinate(stop: threading.Event) -> None:
        lead(settings, config, sign=sign, trust=trust, rendezvous_root=rendezvous_root(signing), stop=stop)
        log.info("stopped")

    return run_until_stopped("coordinator", coordinate)


def migrate_lifecycle(args: argparse.Namespace) -> int:
    from trainmedic.bus.settings import KafkaSettings
    from trainmedic.common.errors import ConfigError, TrainmedicError
    from trainmedic.recovery.coordinator.migrate import AlreadyMigrated, migrate

    try:
        settings = KafkaSettings.from_env(role="coordinator", bootstrap=args.bootstrap)
        copied = migrate(settings)
    except ConfigError as err:
        return exit_with(2, "coordinator", err)
    except (AlreadyMigrated, TrainmedicError) as err:
        return exit_with(1, "coordinator", err)
    for (topic, kind), count in sorted(copied.items()):
        print(f"{count:6d}  {kind} from {topic}")
    print(f"copied {sum(copied.values())} records of an older coordinator to {settings.topics.recovery}")
    return 0
