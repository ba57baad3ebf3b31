"""Run everything one node needs in one process: host agent, GPU producer and executor.

A real deployment runs this once per machine (as a systemd unit or a DaemonSet pod): the
agent sends this node's heartbeats, the GPU producer its GPU samples, and the executor
applies the coordinator's signed commands to the training ranks here. One process instead
of three saves a Python interpreter per node, which matters when a laptop simulates many.

  trainmedic node --node n01                      # NVML GPUs, this host's NICs
  trainmedic node --node n01 --source synthetic --gpu-control ctl --agent-control ctl2

Its options are those of `trainmedic gpu`, `agent` and `executor`, spelled the same; where
two parts share one (--interval-s, --control, --inject, --max-buffered, --flush-timeout-s),
the flag carries the part's name: --gpu-control, --agent-control. Variables are the parts'
own (TRAINMEDIC_GPU_*, TRAINMEDIC_AGENT_*, TRAINMEDIC_EXECUTOR_*; the node's name is
TRAINMEDIC_EXECUTOR_NODE); a --config YAML file has the sections gpu, agent and executor.

Each part stops on SIGTERM/SIGINT; the executor then stops its ranks (see `executor`).
"""

from __future__ import annotations

import argparse
import socket
import sys
from dataclasses import replace

from bus.config import Options, Section
from producers.cli_args import add_kafka_arguments
from producers.config import GpuProducerConfig, HostAgentConfig
from recovery.executor import cli as executor_cli

# The node's name is the executor's option; the GPU producer and the agent take it from there.
EXECUTOR = replace(executor_cli.EXECUTOR, key="executor", title="executor")
GPU = Section(GpuProducerConfig, env="GPU", key="gpu", prefix="gpu-", skip=("node", "synthetic_nodes"),
              title="GPU producer")
AGENT = Section(HostAgentConfig, env="AGENT", key="agent", prefix="agent-", skip=("node",),
                title="host agent")
OPTIONS = Options(EXECUTOR, GPU, AGENT)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_kafka_arguments(parser)
    OPTIONS.add_to(parser)


def run(args: argparse.Namespace) -> int:
    import logging
    import threading
    import time

    from bus.errors import TrainmedicError
    from bus.metrics import serve_metrics
    from bus.settings import KafkaSettings
    from bus.signals import stop_on_signals
    from producers.agent import open_agent, run_agent
    from producers.gpu_producer import open_source, run_gpu_producer
    from recovery.executor.service import Executor

    log = logging.getLogger("trainmedic.node")
    try:
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
    except TrainmedicError as err:
        print(f"trainmedic node: {err}", file=sys.stderr)
        return 2
    if executor_config.insecure:
        log.warning("INSECURE: unsigned commands will be applied on node %s; its acks go unsigned", node)
    serve_metrics(args.metrics_port)  # the three parts' metrics, on one endpoint

    stop = threading.Event()
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

    with stop_on_signals(stop):
        threads = [
            part("executor", lambda: Executor(executor_config, settings).run(stop)),
            part("gpu-producer", lambda: run_gpu_producer(gpu_config, agent_settings, source, stop)),
            part("host-agent", lambda: run_agent(agent_config, agent_settings, agent, stop)),
        ]
        log.info("node %s: host agent, %s GPU producer and executor running", node, gpu_config.source)
        while any(t.is_alive() for t in threads):
            for thread in threads:
                thread.join(0.5)
    return 1 if failures else 0
