"""The detectors bench/detector_live.py measures, each in a process of its own started as
`python bench/detector_live.py --worker MODE APP_ID` (WORKERS: what each MODE runs). A worker reads
the run's topics (TRAINMEDIC_TOPIC_PREFIX) from the earliest offsets as the admin and prints a
report line twice a second. The engines are imported inside the functions, so the bench's own
process, which measures a bare consumer next to them, loads none of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from trainmedic.bus.settings import KafkaSettings
from trainmedic.bus.telemetry_keys import Verifier
from trainmedic.streams.core import Detector
from trainmedic.streams.engines.faust_app import FaustTuning
from trainmedic.streams.live import LiveDetector

# How a worker starts: the bench script's hidden --worker, then MODE and APP_ID.
WORKER_COMMAND = (sys.executable, str(Path(__file__).resolve().parents[1] / "detector_live.py"), "--worker")
TUNED = FaustTuning()
# The Faust engine before issue 18 (asyncio's loop), measured next to the tuned one in every run.
PLAIN = FaustTuning(loop="aio")


def report(events: int, assigned: int, buffered: int, loop: str = "none", forced: int = 0,
           incidents: int | None = None) -> None:
    """One report line; `incidents` None from a worker that decides nothing (ingest alone, no-op)."""
    print(json.dumps({"wall": time.time(), "events": events, "assigned": assigned, "buffered": buffered,
                      "loop": loop, "forced": forced, "incidents": incidents}), flush=True)


def loop_name() -> str:
    """The running event loop's module: "asyncio.unix_events" or "uvloop"."""
    import asyncio

    return type(asyncio.get_running_loop()).__module__


def serve_detector(app_id: str, service_type: type, assigned: Callable[[Any], int],
                   macs: bool = False) -> None:
    """A detector service of `service_type` (the consumer engine, or a sharded detector's decider)
    on a fresh pipeline until signalled, reporting twice a second; `assigned(service)` counts the
    partitions it reads. `macs`: each record's MAC checked, as `trainmedic detector` does with the
    telemetry master key (bus/telemetry_keys.py)."""
    from trainmedic.common.signals import stop_on_signals
    from trainmedic.streams.engines.consumer import ServiceConfig
    from trainmedic.streams.pipeline import Pipeline

    settings = KafkaSettings.from_env(role="admin")
    verifier = Verifier(settings.telemetry_key.key, settings.topic_prefix) if macs else None
    pipeline = Pipeline(settings.topics, LiveDetector(Detector()), verifier=verifier)
    service = service_type(settings, pipeline, ServiceConfig(app_id=app_id, start="earliest"))
    stop = threading.Event()

    def reports() -> None:
        while not stop.wait(0.5):
            report(pipeline.stats.events, assigned(service), pipeline.live.buffered,
                   forced=pipeline.live.forced, incidents=pipeline.stats.incidents)

    threading.Thread(target=reports, daemon=True).start()
    with stop_on_signals(stop):
        service.run(stop.is_set)


def run_consumer_worker(app_id: str, macs: bool = False) -> None:
    """The consumer engine as `trainmedic detector` runs it, from the earliest offsets (`macs`: with
    the telemetry's MACs checked)."""
    import logging

    from trainmedic.streams.engines.consumer import DetectorService, tune_gc

    tune_gc()
    logging.basicConfig(level=logging.WARNING)
    serve_detector(app_id, DetectorService, lambda service: len(service.offsets), macs)


def run_sharded_worker(app_id: str, instances: int, macs: bool = False) -> None:
    """A sharded detector: `instances` ingest processes (`--worker ingest`, `ingest-macs` with `macs`:
    each checks the records' MACs, as `trainmedic detector --stage ingest` does) and the decider, here."""
    import logging

    from trainmedic.streams.engines.consumer import tune_gc
    from trainmedic.streams.engines.decide_stage import DeciderService

    tune_gc()
    logging.basicConfig(level=logging.WARNING)
    ingest = start_ingest(app_id, instances, "ingest-macs" if macs else "ingest")
    given = [Path(os.environ["TRAINMEDIC_HOME"]) / f"{app_id}-i{n}.assigned" for n in range(instances)]
    deadline = time.monotonic() + (120 if os.environ.get("BENCH_SETTLE") else 0)
    while not all(f.exists() for f in given) and time.monotonic() < deadline:
        time.sleep(0.1)  # sustained rates: the group settles (every instance given partitions) first
    try:
        serve_detector(app_id, DeciderService, lambda service: len(service.sources.next))
    finally:
        stop_all(ingest)


def start_ingest(app_id: str, instances: int, mode: str = "ingest") -> list[subprocess.Popen]:
    """`instances` ingest processes of a sharded detector (`--worker ingest`), named i0, i1, …"""
    return [subprocess.Popen([*WORKER_COMMAND, mode, app_id],
                             env={**os.environ, "BENCH_INSTANCE": f"i{n}"}) for n in range(instances)]


def stop_all(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(30)


def run_ingest_stage(app_id: str, instances: int) -> None:
    """The ingest stage alone: `instances` ingest processes into <app-id>-events, no decider; the
    events they have read are the group's committed offsets (the telemetry topics are fresh)."""
    from trainmedic.common.signals import stop_on_signals

    ingest = start_ingest(app_id, instances)
    settings = KafkaSettings.from_env(role="admin")
    topics = settings.topics
    group = Consumer(settings.client_config(**{"group.id": f"{app_id}-ingest", "enable.auto.commit": False}))
    meta = group.list_topics(timeout=10).topics
    parts = [TopicPartition(name, p) for name in (topics.gpu, topics.node, topics.worker)
             for p in meta[name].partitions]
    stop = threading.Event()
    try:
        with stop_on_signals(stop):
            while not stop.wait(0.5):
                done = group.committed(parts, timeout=10)
                report(sum(max(tp.offset, 0) for tp in done), sum(tp.offset >= 0 for tp in done), 0)
    finally:
        group.close()
        stop_all(ingest)


def run_ingest_worker(app_id: str, macs: bool = False) -> None:
    """One ingest instance of a sharded detector (its name from BENCH_INSTANCE); `macs`: checking the
    records' MACs."""
    import logging

    from trainmedic.common.signals import stop_on_signals
    from trainmedic.streams.engines.ingest_stage import IngestConfig, IngestService
    from trainmedic.streams.pipeline import Pipeline

    logging.basicConfig(level=logging.WARNING)
    settings = KafkaSettings.from_env(role="admin")
    instance = os.environ["BENCH_INSTANCE"]
    flag = Path(os.environ["TRAINMEDIC_HOME"]) / f"{app_id}-{instance}.assigned"

    class Reporting(IngestService):
        def _assigned(self, consumer, partitions) -> None:
            super()._assigned(consumer, partitions)
            if self._next:
                flag.touch()

    verifier = Verifier(settings.telemetry_key.key, settings.topic_prefix) if macs else None
    pipeline = Pipeline(settings.topics, None, max_skew_s=300.0, verifier=verifier)
    service = Reporting(settings, pipeline, IngestConfig(app_id=app_id, start="earliest", instance=instance))
    stop = threading.Event()
    with stop_on_signals(stop):
        service.run(stop.is_set)


def run_faust_worker(app_id: str, tuning: FaustTuning) -> None:
    from trainmedic.streams.cli import run_worker as run_faust
    from trainmedic.streams.engines.faust_app import build_app

    settings = KafkaSettings.from_env(role="admin")
    detector = build_app(settings, app_id=app_id, datadir=os.environ["TRAINMEDIC_HOME"], tuning=tuning)
    app, stats, live = detector.app, detector.stats, detector.live
    telemetry = {settings.topics.gpu, settings.topics.node, settings.topics.worker}

    @app.timer(interval=0.5)
    async def reports():
        report(stats.events, sum(tp.topic in telemetry for tp in app.consumer.assignment()), live.buffered,
               loop_name(), live.forced, stats.incidents)

    run_faust(app, "warning", tuning.loop)


def run_noop_worker(app_id: str, tuning: FaustTuning) -> None:
    """A Faust app with the detector's topic settings whose agent only counts what it reads."""
    import faust

    from trainmedic.streams.cli import run_worker as run_faust
    from trainmedic.streams.engines.faust_app import faust_credentials

    settings = KafkaSettings.from_env(role="admin")
    topics = settings.topics
    app = faust.App(app_id, broker=[f"kafka://{host.strip()}" for host in settings.bootstrap.split(",")],
                    broker_credentials=faust_credentials(settings), store="memory://", web_enabled=False,
                    topic_disable_leader=True, datadir=os.environ["TRAINMEDIC_HOME"], **tuning.app_settings())
    telemetry = app.topic(topics.gpu, topics.node, topics.worker, value_serializer="raw",
                          key_serializer="raw")
    count = {"events": 0}

    @app.agent(telemetry)
    async def process(stream):
        async for _ in stream.events():
            count["events"] += 1

    @app.timer(interval=0.5)
    async def reports():
        report(count["events"], sum(tp.topic in telemetry.topics for tp in app.consumer.assignment()), 0,
               loop_name())

    run_faust(app, "warning", tuning.loop)



WORKERS = {
    "consumer": run_consumer_worker, "consumer-macs": partial(run_consumer_worker, macs=True),
    "ingest": run_ingest_worker, "ingest-macs": partial(run_ingest_worker, macs=True),
    "sharded-1": partial(run_sharded_worker, instances=1),
    "sharded-2": partial(run_sharded_worker, instances=2),
    "sharded-1-macs": partial(run_sharded_worker, instances=1, macs=True),
    "ingest-1": partial(run_ingest_stage, instances=1), "ingest-2": partial(run_ingest_stage, instances=2),
    "faust": partial(run_faust_worker, tuning=TUNED), "faust-plain": partial(run_faust_worker, tuning=PLAIN),
    "noop": partial(run_noop_worker, tuning=TUNED), "noop-plain": partial(run_noop_worker, tuning=PLAIN),
}
