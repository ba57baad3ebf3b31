"""Run the detector: a Faust worker that turns telemetry into incidents (also `python -m streams`).

It reads the telemetry topics, decides within seconds what broke and how badly (TAXONOMY.md),
and writes `incident` events to the incidents topic; values that do not validate go to the
dlq topic with the reason. Its state lives in a changelog-backed table, so a restarted
worker resumes where it stopped. Run one detector per cluster (see docs/detection.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trainmedic.metrics_flag import add_metrics_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP)")
    parser.add_argument("--app-id", default="trainmedic-detector",
                        help="Faust app id: consumer group and prefix of its internal topics")
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="detector configuration as JSON, nested by section (see docs/detection.md)")
    parser.add_argument("--lateness-s", type=float, default=0.5,
                        help="event time the detector waits for late events from other topics")
    parser.add_argument("--datadir", default=None, help="Faust's local data directory "
                        "(default: $TRAINMEDIC_HOME/detector)")
    parser.add_argument("--web-port", type=int, default=None,
                        help="serve Faust's web views on this port (off by default)")
    parser.add_argument("--loglevel", default="info", choices=["debug", "info", "warn", "error"])
    add_metrics_argument(parser)


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from streams.app import build_app
    from streams.core import DetectorConfig
    from streams.live import LiveConfig
    from trainmedic.errors import TrainmedicError
    from trainmedic.kafka import wait_for_topics
    from trainmedic.kafka.lag import LagSampler
    from trainmedic.metrics import serve_metrics
    from trainmedic.settings import KafkaSettings, home

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
    datadir = args.datadir or str(home() / "detector")
    detector = build_app(settings, app_id=args.app_id, config=config, live_config=live,
                         datadir=datadir, web_port=args.web_port)
    if serve_metrics(args.metrics_port) is not None:
        LagSampler(settings, args.app_id, [topics.gpu, topics.node, topics.worker]).start()
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
