"""Sample every GPU of this host once per interval and publish one gpu_sample per GPU.

Sources: NVML (the default; needs the NVIDIA driver), a dcgm-exporter endpoint, or synthetic
GPUs with scripted faults for demos and recovery drills. Fault specs (synthetic only):

  xid=79,node=n02,gpu=3,at=30s     Xid 79 on one GPU, 30 s after start
  ecc=dbe,node=n01,gpu=0,count=2   two uncorrectable ECC errors at once
  nvlink=5,gpu=1,at=10s            five NVLink errors on GPU 1 of every node
  thermal=hw,node=n01,at=5s,for=20s
  lost,node=n02,gpu=3,at=31s       the GPU stops reporting

Omitted node or gpu means all of them; `at` counts from start. While running, append specs
to the --control file to inject them at once (or `at` after the line is read).
"""

from __future__ import annotations

import argparse
import socket
import sys

from bus.timespan import duration_arg
from producers.cli_args import add_delivery_arguments, names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--source", choices=("nvml", "dcgm", "synthetic"), default="nvml",
                        help="where samples come from (default: nvml)")
    parser.add_argument("--node", help="the node name on the samples (default: this host's name)")
    parser.add_argument("--interval", type=duration_arg, default=1.0, metavar="DURATION",
                        help="time between samples of a GPU, e.g. 1s or 250ms (default 1s)")
    dcgm = parser.add_argument_group("dcgm-exporter (--source dcgm)")
    dcgm.add_argument("--dcgm-url", metavar="URL", help="e.g. http://localhost:9400/metrics")
    synthetic = parser.add_argument_group("synthetic GPUs (--source synthetic)")
    synthetic.add_argument("--nodes", type=names, default=(), metavar="N1,N2",
                           help="synthetic node names (default: --node)")
    synthetic.add_argument("--gpus", type=int, default=8, help="GPUs per node (default 8)")
    synthetic.add_argument("--seed", type=int, default=0, help="seed of the sampled values (default 0)")
    synthetic.add_argument("--inject", action="append", default=[], metavar="SPEC",
                           help="a fault to inject (repeatable); see the grammar above")
    synthetic.add_argument("--control", metavar="FILE",
                           help="a file the producer watches: each line appended is a fault spec to inject")
    add_delivery_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import threading
    import time
    from pathlib import Path

    from bus.errors import ConfigError, TrainmedicError
    from bus.metrics import serve_metrics
    from bus.settings import KafkaSettings
    from bus.signals import stop_on_signals
    from producers.config import Delivery, GpuProducerConfig
    from producers.faults import GpuFault, parse_fault
    from producers.gpu_producer import open_source, run_gpu_producer
    from producers.nvml import NvmlUnavailable

    try:
        faults = [parse_fault(spec) for spec in args.inject]
        gpu_faults = tuple(fault for fault in faults if isinstance(fault, GpuFault))
        if len(gpu_faults) != len(faults):
            raise ConfigError("link flaps are injected by `trainmedic agent`, not the GPU producer")
        config = GpuProducerConfig(
            node=args.node or socket.gethostname(), source=args.source, interval_s=args.interval,
            dcgm_url=args.dcgm_url, synthetic_nodes=args.nodes, gpus_per_node=args.gpus, seed=args.seed,
            faults=gpu_faults,
            control=Path(args.control) if args.control else None,
            delivery=Delivery(max_buffered=args.max_buffered, flush_timeout_s=args.flush_timeout),
        )
        settings = KafkaSettings.from_env(bootstrap=args.bootstrap)
    except ConfigError as err:
        print(f"trainmedic gpu: {err}", file=sys.stderr)
        return 2
    stop = threading.Event()
    try:
        source = open_source(config, time.time())
    except NvmlUnavailable as err:
        print(f"trainmedic gpu: no NVIDIA driver answers here ({err}).\n"
              "Other sources: --source dcgm --dcgm-url http://HOST:9400/metrics (a dcgm-exporter), or "
              "--source synthetic --nodes n01,n02 --gpus 8 (fake GPUs with --inject faults).",
              file=sys.stderr)
        return 1
    except ConfigError as err:
        print(f"trainmedic gpu: {err}", file=sys.stderr)
        return 2
    try:
        with stop_on_signals(stop):
            serve_metrics(args.metrics_port)
            run_gpu_producer(config, settings, source, stop)
    except TrainmedicError as err:
        print(f"trainmedic gpu: {err}", file=sys.stderr)
        return 1
    return 0
