"""Sample every GPU of this host once per interval and publish one gpu_sample per GPU: from NVML (the
default), a dcgm-exporter endpoint, or synthetic GPUs with scripted faults (--inject, --control;
docs/producers.md, "GPU producer" and "Fault-injection grammar").
"""

from __future__ import annotations

import argparse
import socket
import sys

from trainmedic.bus.config import Options, Section
from trainmedic.producers.cli_args import add_kafka_arguments
from trainmedic.producers.config import GpuProducerConfig

GPU = Section(GpuProducerConfig, env="GPU")
OPTIONS = Options(GPU)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    OPTIONS.add_to(parser)
    add_kafka_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import threading
    import time

    from trainmedic.bus.errors import ConfigError, TrainmedicError
    from trainmedic.bus.metrics import serve_metrics
    from trainmedic.bus.settings import KafkaSettings
    from trainmedic.bus.signals import stop_on_signals
    from trainmedic.producers.gpu_producer import open_source, run_gpu_producer
    from trainmedic.producers.nvml import NvmlUnavailable

    try:
        config = OPTIONS.build(GPU, args, node=lambda _: socket.gethostname())
        settings = KafkaSettings.from_env(role="agent", bootstrap=args.bootstrap)
    except ConfigError as err:
        print(f"trainmedic gpu: {err}", file=sys.stderr)
        return 2
    stop = threading.Event()
    try:
        source = open_source(config, time.time())
    except NvmlUnavailable as err:
        print(f"trainmedic gpu: no NVIDIA driver answers here ({err}).\n"
              "Other sources: --source dcgm --dcgm-url http://HOST:9400/metrics (a dcgm-exporter), or "
              "--source synthetic --synthetic-nodes n01,n02 --gpus-per-node 8 "
              "(fake GPUs with --inject faults).",
              file=sys.stderr)
        return 1
    except ConfigError as err:
        print(f"trainmedic gpu: {err}", file=sys.stderr)
        return 2
    try:
        with stop_on_signals(stop):
            serve_metrics(args.metrics_port, args.metrics_host)
            run_gpu_producer(config, settings, source, stop)
    except TrainmedicError as err:
        print(f"trainmedic gpu: {err}", file=sys.stderr)
        return 1
    return 0
