"""Run this node's executor: apply signed commands to the job ranks on this node, at most once.
Every option also has a TRAINMEDIC_EXECUTOR_* variable and a --config YAML key
(docs/executor.md, "Running it"; keys and signing: docs/security.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from trainmedic.bus.config import Options, Section
from trainmedic.bus.service_cli import add_service_arguments, exit_with, run_until_stopped
from trainmedic.common.errors import TrainmedicError
from trainmedic.recovery.executor.config import ExecutorConfig

# The trusted keys, the node's key, the ranks' user and NIC are looked up; the poll is an internal tick.
EXECUTOR = Section(ExecutorConfig, env="EXECUTOR",
                   skip=("trusted", "node_key", "rank_user", "data_plane", "poll_s"))
OPTIONS = Options(EXECUTOR)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_service_arguments(parser, OPTIONS)


def build_config(options: Options, section: Section, args: argparse.Namespace, **computed) -> ExecutorConfig:
    """The executor's config: the trusted keys and the node's own key loaded from the keys folder
    unless insecure, the keys folder and the state dir under TRAINMEDIC_HOME and the jobs' directories
    beside it unless given, the ranks' user looked up, the data plane checked against this host's NICs.
    As root without a rank user, a ConfigError unless ranks_as_root says so; warns, once, when ranks
    run as the executor's own user."""
    import logging
    import os
    import pwd

    from trainmedic.bus.settings import home
    from trainmedic.common.errors import ConfigError
    from trainmedic.recovery import keyring
    from trainmedic.recovery.executor import data_plane
    from trainmedic.recovery.executor.job_dirs import (
        RANKS_AS_ROOT_REFUSED,
        RANKS_AS_ROOT_WARNING,
        SHARED_USER_WARNING,
        RankUser,
        default_root,
    )
    from trainmedic.recovery.executor.rank_users import JobUids

    keyring.refuse_legacy()
    config = options.build(
        section, args, **computed,
        state_dir=lambda values: home() / "executor" / str(values.get("node")),
        jobs_dir=lambda values: default_root(home()) / str(values.get("node")),
        rank_user=lambda values: (None if values.get("run_as") is None
                                  else RankUser.named(str(values["run_as"]), os.geteuid())),
        data_plane=lambda values: data_plane.resolve(*(None if values.get(name) is None else str(values[name])
                                                       for name in ("data_interface", "data_address"))),
        keys_dir=lambda values: None if values.get("insecure") is True else keyring.default_dir(),
        trusted=lambda values: (None if values.get("insecure") is True
                                else keyring.load_trusted(Path(values["keys_dir"]))),
        node_key=lambda values: (None if values.get("insecure") is True or not values.get("node")
                                 else keyring.load_signing(Path(values["keys_dir"]),
                                                           keyring.node_role(str(values["node"])))),
    )
    if config.job_uids is not None:
        if os.geteuid() != 0:
            raise ConfigError(f"job_uids: switching ranks to a uid per job needs an executor running as "
                              f"root, and this one runs as uid {os.geteuid()}")
        JobUids.parse(config.job_uids, config.state_dir / "job-uids.json")  # a ConfigError: what is wrong
    elif config.rank_user is None and os.geteuid() == 0:
        if not config.ranks_as_root:
            raise ConfigError(RANKS_AS_ROOT_REFUSED)
        logging.getLogger("trainmedic.executor").warning(RANKS_AS_ROOT_WARNING)
    elif config.rank_user is None:
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
        return exit_with(2, "executor", err)
    if config.insecure:
        log.warning("INSECURE: command signatures are NOT checked; anyone who can write to %s "
                    "can start and stop processes on this node", kafka.topics.commands)
    else:
        log.info("commands must be signed by one of the keys %s; acks signed with node key %s (from %s)",
                 config.trusted, config.node_key.key_id, config.keys_dir)
    if config.data_plane is not None:
        log.info("ranks meet over NIC %s (address %s)", config.data_plane.interface,
                 config.data_plane.address or "none")
    serve_metrics(args.metrics_port, args.metrics_host)
    return run_until_stopped("executor", lambda stop: Executor(config, kafka).run(stop))
