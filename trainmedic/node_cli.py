"""Run everything one node needs in one process: host agent, GPU producer and executor.

A real deployment runs this once per machine (as a systemd unit or a DaemonSet pod): the
agent sends this node's heartbeats, the GPU producer its GPU samples, and the executor
applies the coordinator's signed commands to the training ranks here. One process instead
of three saves a Python interpreter per node, which matters when a laptop simulates many.

  trainmedic node --node n01                      # NVML GPUs, this host's NICs
  trainmedic node --node n01 --gpu-source synthetic --gpu-control ctl --agent-control ctl2

Each part stops on SIGTERM/SIGINT; the executor then stops its ranks (see `executor`).
"""

from __future__ import annotations

import argparse
import socket
import sys

from bus.metrics_flag import add_metrics_argument
from bus.timespan import duration_arg
from producers.cli_args import names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--node", help="this node's name (default: this host's name)")
    parser.add_argument("--interval", type=duration_arg, default=1.0, metavar="DURATION",
                        help="heartbeat and GPU sampling interval (default 1s)")
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP)")
    add_metrics_argument(parser)
    gpu = parser.add_argument_group("GPU producer")
    gpu.add_argument("--gpu-source", choices=("nvml", "dcgm", "synthetic"), default="nvml")
    gpu.add_argument("--gpus", type=int, default=8, help="synthetic GPUs on this node (default 8)")
    gpu.add_argument("--dcgm-url", help="dcgm-exporter metrics URL, for --gpu-source dcgm")
    gpu.add_argument("--gpu-control", metavar="FILE", help="synthetic GPU faults appended here are injected")
    agent = parser.add_argument_group("host agent")
    agent.add_argument("--links", type=names, default=(), metavar="L1,L2", help="links to report")
    agent.add_argument("--sysfs", default="/sys", metavar="DIR", help="sysfs root (default /sys)")
    agent.add_argument("--agent-control", metavar="FILE", help="link flaps appended here are injected")
    executor = parser.add_argument_group("executor")
    executor.add_argument("--state-dir", help="default: $TRAINMEDIC_HOME/executor/NODE")
    executor.add_argument("--freshness-s", type=float, default=60.0, help="oldest command accepted")
    executor.add_argument("--stop-grace-s", type=float, default=10.0, help="SIGTERM to SIGKILL")
    executor.add_argument("--insecure", action="store_true", help="accept unsigned commands")
    executor.add_argument("--cold-start", action="store_true",
                          help="start every rank as a new interpreter instead of forking it warm")


def run(args: argparse.Namespace) -> int:
    import logging
    import threading
    import time
    from pathlib import Path

    from pydantic import ValidationError

    from bus.errors import TrainmedicError
    from bus.metrics import serve_metrics
    from bus.settings import KafkaSettings, home
    from bus.signals import stop_on_signals
    from producers.agent import open_agent, run_agent
    from producers.config import GpuProducerConfig, HostAgentConfig
    from producers.gpu_producer import open_source, run_gpu_producer
    from recovery.executor.config import ExecutorConfig
    from recovery.executor.service import Executor
    from recovery.signing import load_key

    log = logging.getLogger("trainmedic.node")
    node = args.node or socket.gethostname()
    try:
        settings = KafkaSettings.from_env(bootstrap=args.bootstrap)
        now = time.time()
        gpu_config = GpuProducerConfig(
            node=node, source=args.gpu_source, interval_s=args.interval, dcgm_url=args.dcgm_url,
            gpus_per_node=args.gpus, control=Path(args.gpu_control) if args.gpu_control else None,
        )
        agent_config = HostAgentConfig(
            node=node, interval_s=args.interval, links=args.links, sysfs=Path(args.sysfs),
            control=Path(args.agent_control) if args.agent_control else None,
        )
        executor_config = ExecutorConfig(
            node=node, state_dir=Path(args.state_dir) if args.state_dir else home() / "executor" / node,
            freshness_s=args.freshness_s, stop_grace_s=args.stop_grace_s,
            key=None if args.insecure else load_key(), insecure=args.insecure,
            warm_start=not args.cold_start,
        )
        source = open_source(gpu_config, now)
        agent = open_agent(agent_config, now)
    except ValidationError as err:
        print(f"trainmedic node: {err.errors(include_url=False)[0]['msg']}", file=sys.stderr)
        return 2
    except TrainmedicError as err:
        print(f"trainmedic node: {err}", file=sys.stderr)
        return 2
    if args.insecure:
        log.warning("INSECURE: unsigned commands will be applied on node %s", node)
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
            part("gpu-producer", lambda: run_gpu_producer(gpu_config, settings, source, stop)),
            part("host-agent", lambda: run_agent(agent_config, settings, agent, stop)),
        ]
        log.info("node %s: host agent, %s GPU producer and executor running", node, args.gpu_source)
        while any(t.is_alive() for t in threads):
            for thread in threads:
                thread.join(0.5)
    return 1 if failures else 0
