"""Run everything one node needs in one process: host agent, GPU producer and executor; stopped on
purpose (SIGTERM), the node leaves in order (docs/producers.md, "Configuration").

  trainmedic node --node n01                      # NVML GPUs, this host's NICs
  trainmedic node --node n01 --source synthetic --gpu-control ctl --agent-control ctl2
  trainmedic node --join @token.txt --bootstrap kafka:9092   # first start of a node an operator enrolled
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import replace

from trainmedic.bus.config import Options, Section
from trainmedic.bus.service_cli import add_kafka_arguments
from trainmedic.common.timespan import duration_arg
from trainmedic.producers.config import GpuProducerConfig, HostAgentConfig
from trainmedic.recovery.executor import cli as executor_cli

# The node's name is the executor's option; the GPU producer and the agent take it from there.
EXECUTOR = replace(executor_cli.EXECUTOR, key="executor", title="executor")
GPU = Section(GpuProducerConfig, env="GPU", key="gpu", prefix="gpu-", skip=("node", "synthetic_nodes"),
              title="GPU producer")
AGENT = Section(HostAgentConfig, env="AGENT", key="agent", prefix="agent-", skip=("node",),
                title="host agent")
OPTIONS = Options(EXECUTOR, GPU, AGENT)
# librdkafka settings that make a client a principal: a SASL user, a client certificate or key.
PRINCIPAL_SETTINGS = ("sasl.", "ssl.certificate.", "ssl.key.", "ssl.keystore.")


def shared_principal(env: Mapping[str, str]) -> str | None:
    """Why this node's Kafka settings cannot work, or None. Its executor and its agent (and GPU
    producer) are two principals, each with its own ACLs: one TRAINMEDIC_KAFKA_CONFIG that names a
    principal gives both parts the same one, and the broker refuses one of them."""
    from trainmedic.bus.settings import KafkaSettings

    if not env.get("TRAINMEDIC_KAFKA_CONFIG"):
        return None
    settings = KafkaSettings.from_env(env)  # a ConfigError when it is no JSON object
    named = sorted(k for k in (*settings.extra, *settings.secrets) if k.startswith(PRINCIPAL_SETTINGS))
    if not named:
        return None
    return (f"TRAINMEDIC_KAFKA_CONFIG names one Kafka principal ({', '.join(named)}) for both parts of "
            "this node, the executor and the agent, and the broker's ACLs refuse one of them: unset it "
            "and set TRAINMEDIC_CREDENTIALS_DIR to a folder holding each role's librdkafka settings as "
            "executor.json and agent.json (docs/security.md, \"How a service finds its credentials\")")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_kafka_arguments(parser)
    OPTIONS.add_to(parser)
    parser.add_argument("--join", metavar="@FILE|-", default=None,
                        help="before starting, join the cluster with the one-time token `trainmedic nodes "
                             "enroll NODE` printed: @FILE reads it from FILE (delete the file once joined), "
                             "- from stdin (one line); a token given here itself works but stays visible "
                             "in the process list and the shell's history. The broker's registrar (the "
                             "first --bootstrap host, the token's port), checked against the CA the token "
                             "pins, gives this node its own Kafka credentials (into "
                             "TRAINMEDIC_CREDENTIALS_DIR) and the coordinators' keys (trusted in the keys "
                             "folder, where the node's key is made); the node's name is the token's, its "
                             "GPUs are counted by NVML (or --gpus-per-node with --source "
                             "synthetic). Once joined, start it without --join")
    parser.add_argument("--leave-timeout-s", type=duration_arg, default=60.0, metavar="SECONDS",
                        help="on SIGTERM/SIGINT, wait at most this long for the coordinator to move this "
                        "node's jobs off it before stopping its ranks (default 60; 0: leave at once)")


def run(args: argparse.Namespace) -> int:
    import logging
    import threading
    import time

    from trainmedic.bus.metrics import serve_metrics
    from trainmedic.bus.settings import KafkaSettings
    from trainmedic.common.errors import ConfigError, TrainmedicError
    from trainmedic.common.signals import leave_on_signals
    from trainmedic.producers.agent import open_agent, run_agent
    from trainmedic.producers.gpu_producer import open_source, run_gpu_producer
    from trainmedic.recovery.executor.command_loop import Executor

    log = logging.getLogger("trainmedic.node")
    try:
        if args.join:
            from trainmedic.node_join import before_start

            before_start(args)
        refused = shared_principal(os.environ)
        if refused:
            raise ConfigError(refused)
        executor_config = executor_cli.build_config(OPTIONS, EXECUTOR, args,
                                                    node=lambda _: socket.gethostname())
        node = executor_config.node
        gpu_config = OPTIONS.build(GPU, args, node=lambda _: node)
        agent_config = OPTIONS.build(AGENT, args, node=lambda _: node)
        # Each part as its own principal: the executor's commands are not the agents' to read.
        settings = KafkaSettings.from_env(role="executor", bootstrap=args.bootstrap)
        agent_settings = KafkaSettings.from_env(role="agent", bootstrap=args.bootstrap)
        now = time.time()
        source = open_source(gpu_config, now)
        agent = open_agent(agent_config, now)
        heard = threading.Event()  # Kafka took a heartbeat of the agent: the executor joins then
        executor = Executor(executor_config, settings, heard=heard)
    except TrainmedicError as err:
        print(f"trainmedic node: {err}", file=sys.stderr)
        return 2
    if executor_config.insecure:
        log.warning("INSECURE: unsigned commands will be applied on node %s; its acks go unsigned", node)
    if executor_config.data_plane is not None:
        log.info("node %s: ranks meet over NIC %s (address %s)", node, executor_config.data_plane.interface,
                 executor_config.data_plane.address or "none")
    serve_metrics(args.metrics_port, args.metrics_host)  # the three parts' metrics, on one endpoint

    leave, stop = threading.Event(), threading.Event()
    agent_stop = threading.Event()  # the agent beats until set (its last heartbeat says if the node leaves)
    failures: list[BaseException] = []

    def part(name: str, body) -> threading.Thread:
        def guarded() -> None:
            try:
                body()
            except BaseException as err:  # one part failing stops the node: it is no longer whole
                log.exception("%s of node %s failed; stopping the node", name, node)
                failures.append(err)
                stop.set()
        thread = threading.Thread(target=guarded, name=f"{name}-{node}")
        thread.start()
        return thread

    with leave_on_signals(leave, stop):
        threads = [
            part("executor", lambda: executor.run(stop)),
            part("gpu-producer", lambda: run_gpu_producer(gpu_config, agent_settings, source, stop)),
            part("host-agent", lambda: run_agent(agent_config, agent_settings, agent, agent_stop, heard)),
        ]
        log.info("node %s: host agent, %s GPU producer and executor running", node, gpu_config.source)
        deadline = None
        while any(t.is_alive() for t in threads):
            for thread in threads:
                thread.join(0.5)
            if leave.is_set() and deadline is None:
                deadline = time.monotonic() + args.leave_timeout_s
                log.info("node %s leaves: announcing it, then waiting up to %gs for the coordinator to "
                         "move its jobs off it", node, args.leave_timeout_s)
                executor.leave(f"planned shutdown: trainmedic node on {node} stopped")
                agent.leave()
                agent_stop.set()
            if deadline is not None and not stop.is_set():
                if executor.emptied.is_set() or args.leave_timeout_s == 0:
                    why = "no rank runs here any more" if executor.emptied.is_set() else "no wait asked"
                    log.info("node %s: %s; leaving", node, why)
                    stop.set()
                elif time.monotonic() >= deadline:
                    log.warning("node %s: its ranks still run after %gs; stopping them and leaving", node,
                                args.leave_timeout_s)
                    stop.set()
            if stop.is_set():
                agent_stop.set()
    if not failures:
        log.info("node %s left", node)
    return 1 if failures else 0
