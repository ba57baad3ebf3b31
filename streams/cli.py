"""Run the detector: telemetry in, incidents out (also `python -m streams`).

It reads the telemetry topics, decides within seconds what broke and how badly (TAXONOMY.md),
and writes `incident` events to the incidents topic; values that do not validate go to the
dlq topic with the reason. Both engines checkpoint its state with the offsets it has read to
the compacted topic <app-id>-checkpoints, so a restarted detector (even after kill -9) resumes
exactly where the checkpoint was taken. Run one detector per cluster (see
docs/streams.md).

Engines: `consumer` (default) is a plain Kafka consumer loop; `faust` runs the same pipeline
and the same checkpoints as a Faust app. Faust's per-message path is
several times slower: it drains 7-10k events/s where the consumer engine drains 56-114k on
two cores (docs/streams.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from pathlib import Path

from bus.metrics_flag import add_metrics_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP)")
    parser.add_argument("--engine", choices=["consumer", "faust"], default="consumer",
                        help="consumer: a plain Kafka consumer loop (default); faust: a Faust worker")
    parser.add_argument("--app-id", default="trainmedic-detector",
                        help="consumer group, and the prefix of the detector's own topics")
    parser.add_argument("--start", type=_start, default="latest", metavar="WHERE",
                        help="consumer engine, with no checkpoint (or one it cannot read): where to begin: "
                        "earliest, latest (default), an ISO 8601 time or a span ago like 10m")
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="detector configuration as JSON, nested by section (see docs/detection.md)")
    parser.add_argument("--lateness-s", type=float, default=0.5,
                        help="event time the detector waits for late events from other topics")
    parser.add_argument("--datadir", default=None, help="faust engine: Faust's local data directory "
                        "(default: $TRAINMEDIC_HOME/detector)")
    parser.add_argument("--web-port", type=int, default=None,
                        help="faust engine: serve Faust's web views on this port (off by default)")
    parser.add_argument("--loglevel", default="info", choices=["debug", "info", "warn", "error"])
    add_metrics_argument(parser)


def _start(text: str) -> str | float:
    from streams.record import parse_instant

    if text in ("earliest", "latest"):
        return text
    try:
        return parse_instant(text, time.time())
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from bus.admin import wait_for_topics
    from bus.errors import TrainmedicError
    from bus.lag import LagSampler
    from bus.metrics import serve_metrics
    from bus.settings import KafkaSettings
    from streams.core import DetectorConfig
    from streams.live import LiveConfig

    try:
        settings = KafkaSettings.from_env(bootstrap=args.bootstrap)
        config = DetectorConfig.from_dict(json.loads(args.config.read_text())) if args.config else None
        live = LiveConfig(lateness_s=args.lateness_s)
    except (TrainmedicError, ValidationError, ValueError, OSError) as err:
        print(f"trainmedic detector: {err}", file=sys.stderr)
        return 2
    topics = settings.topics
    try:
        wait_for_topics(settings, [topics.gpu, topics.node, topics.worker, topics.incidents, topics.dlq])
    except TrainmedicError as err:
        print(f"trainmedic detector: {err}", file=sys.stderr)
        return 1
    if serve_metrics(args.metrics_port) is not None:
        LagSampler(settings, args.app_id, [topics.gpu, topics.node, topics.worker]).start()
    if args.engine == "faust":
        return _run_faust(args, settings, config, live)
    return _run_consumer(args, settings, config, live)


def _run_consumer(args: argparse.Namespace, settings, config, live_config) -> int:
    from bus.errors import TrainmedicError
    from bus.signals import stop_on_signals
    from streams.core import Detector
    from streams.live import LiveDetector
    from streams.pipeline import Pipeline
    from streams.service import DetectorService, ServiceConfig, tune_gc

    tune_gc()
    logging.basicConfig(format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    logging.getLogger().setLevel(args.loglevel.upper())
    pipeline = Pipeline(settings.topics, LiveDetector(Detector(config), live_config))
    service = DetectorService(settings, pipeline, ServiceConfig(app_id=args.app_id, start=args.start))
    stop = threading.Event()
    try:
        with stop_on_signals(stop):
            service.run(stop.is_set)
    except TrainmedicError as err:
        print(f"trainmedic detector: {err}", file=sys.stderr)
        return 1
    logging.getLogger(__name__).info("stopped after %d events, %d incidents, %d dead letters",
                                     pipeline.stats.events, pipeline.stats.incidents,
                                     pipeline.stats.dead_lettered)
    return 0


def _run_faust(args: argparse.Namespace, settings, config, live_config) -> int:
    from bus.settings import home
    from streams.app import build_app

    datadir = args.datadir or str(home() / "detector")
    detector = build_app(settings, app_id=args.app_id, config=config, live_config=live_config,
                         datadir=datadir, web_port=args.web_port)
    return run_worker(detector.app, args.loglevel)


def run_worker(app, loglevel: str) -> int:
    """Run a Faust worker in this process until SIGTERM/SIGINT."""
    import faust

    worker = faust.Worker(app, loglevel=loglevel, quiet=True, redirect_stdouts=False)
    try:
        worker.execute_from_commandline()
    except SystemExit as stop:
        return int(stop.code or 0)
    return 0
