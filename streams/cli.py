"""Run the detector: telemetry in, incidents out (also `python -m trainmedic.streams`); one per
cluster, or a sharded one (--stage ingest, many; --stage decide, one). Every option also has a
TRAINMEDIC_DETECTOR_* variable and a --config key (docs/streams.md, "Running it"; docs/detection.md).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping

from trainmedic.bus.config import Options, Section
from trainmedic.bus.service_cli import add_service_arguments, exit_with, run_until_stopped
from trainmedic.streams.config import CORE_SECTIONS, DetectorServiceConfig

CONFIG_FORMAT = """\
config file (YAML or JSON; every key optional; the flags' names with underscores):
  app_id: acme.detector     # default: the topic prefix + detector
  start: latest
  live: {lateness_s: 0.5, idle_s: 2}
  hang: {floor_s: 30}       # the detection core's sections (YAML only): heartbeat, gpu, hang,
  escalation: {sev2_count: 3}   # straggler, correlation, link, escalation (docs/detection.md)
"""

# The detection core's tuning tables are YAML keys, not flags.
DETECTOR = Section(DetectorServiceConfig, env="DETECTOR", file_only=CORE_SECTIONS)
OPTIONS = Options(DETECTOR)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_service_arguments(parser, OPTIONS, CONFIG_FORMAT)


def build_config(args: argparse.Namespace, settings, env: Mapping[str, str] = os.environ
                 ) -> DetectorServiceConfig:
    """The detector's config from flags, TRAINMEDIC_DETECTOR_* variables and the file; the app id under
    the topic prefix and Faust's data under TRAINMEDIC_HOME unless given."""
    from trainmedic.bus.settings import home

    return OPTIONS.build(DETECTOR, args, env, app_id=lambda _: settings.topics.owned("detector"),
                         datadir=lambda _: home(env) / "detector", keys_dir=lambda _: home(env) / "keys",
                         instance=lambda _: socket.gethostname())


def run(args: argparse.Namespace) -> int:
    from trainmedic.bus.admin import wait_for_topics
    from trainmedic.bus.lag import LagSampler
    from trainmedic.bus.metrics import serve_metrics
    from trainmedic.bus.settings import KafkaSettings
    from trainmedic.common.errors import TrainmedicError
    from trainmedic.streams.engines.batches import events_topic

    try:
        settings = KafkaSettings.from_env(role="detector", bootstrap=args.bootstrap)
        options = build_config(args, settings)
    except TrainmedicError as err:
        return exit_with(2, "detector", err)
    config, live = options.detection, options.live
    topics = settings.topics
    try:
        wait_for_topics(settings, [topics.gpu, topics.node, topics.worker, topics.incidents, topics.dlq])
    except TrainmedicError as err:
        return exit_with(1, "detector", err)
    if serve_metrics(args.metrics_port, args.metrics_host) is not None:
        group, watched = options.app_id, [topics.gpu, topics.node, topics.worker]
        if options.stage == "ingest":
            group = f"{options.app_id}-ingest"
        elif options.stage == "decide":
            watched = [events_topic(options.app_id)]
        LagSampler(settings, group, watched).start()
    if options.engine == "faust":
        return _run_faust(options, settings, config, live)
    return _run_consumer(options, settings, config, live)


def _run_consumer(options: DetectorServiceConfig, settings, config, live_config) -> int:
    from trainmedic.bus.telemetry_keys import verifier_of
    from trainmedic.streams.core import Detector
    from trainmedic.streams.engines.consumer import DetectorService, ServiceConfig, tune_gc
    from trainmedic.streams.engines.decide_stage import DeciderService
    from trainmedic.streams.engines.ingest_stage import IngestConfig, IngestService
    from trainmedic.streams.live import LiveDetector
    from trainmedic.streams.pipeline import Pipeline
    from trainmedic.streams.placements import placements_of

    tune_gc()
    logging.basicConfig(format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    logging.getLogger().setLevel(options.loglevel.upper())
    start = options.start_at(time.time())
    said = logging.getLogger("trainmedic.detector")
    verifier = verifier_of(settings.telemetry_key, settings.topic_prefix, said)
    if options.stage == "ingest":
        pipeline = Pipeline(settings.topics, None, max_skew_s=live_config.max_skew_s,
                            max_ahead_s=live_config.max_ahead_s, verifier=verifier)
        service = IngestService(settings, pipeline, IngestConfig(
            app_id=options.app_id, start=start, instance=options.instance,
            events_partitions=options.events_partitions))
    else:
        placed = placements_of(options.keys_dir, settings.topic_prefix, said)
        # The decide stage reads the ingest stage's batches, checked there.
        pipeline = Pipeline(settings.topics, LiveDetector(Detector(config, placed=placed), live_config),
                            verifier=verifier if options.stage == "all" else None)
        service_config = ServiceConfig(app_id=options.app_id, start=start)
        service = (DetectorService(settings, pipeline, service_config) if options.stage == "all" else
                   DeciderService(settings, pipeline, service_config,
                                  events_partitions=options.events_partitions))

    def detect(stop: threading.Event) -> None:
        service.run(stop.is_set)
        logging.getLogger(__name__).info("stopped after %d events, %d incidents, %d dead letters",
                                         pipeline.stats.events, pipeline.stats.incidents,
                                         pipeline.stats.dead_lettered)

    return run_until_stopped("detector", detect)


def _run_faust(options: DetectorServiceConfig, settings, config, live_config) -> int:
    from trainmedic.streams.engines.faust_app import FaustTuning, build_app

    datadir = str(options.datadir)
    tuning = FaustTuning()
    detector = build_app(settings, app_id=options.app_id, config=config, live_config=live_config,
                         datadir=datadir, web_port=options.web_port, tuning=tuning, keys_dir=options.keys_dir)
    return run_worker(detector.app, options.loglevel, tuning.loop)


def run_worker(app, loglevel: str, loop: str) -> int:
    """Run a Faust worker in this process until SIGTERM/SIGINT, on `loop` (a `mode.loop` name).

    The loop is chosen here, before the worker makes it: the app makes none until it runs."""
    import faust
    import mode.loop

    mode.loop.use(loop)
    worker = faust.Worker(app, loglevel=loglevel, quiet=True, redirect_stdouts=False)
    try:
        worker.execute_from_commandline()
    except SystemExit as stop:
        return int(stop.code or 0)
    return 0
