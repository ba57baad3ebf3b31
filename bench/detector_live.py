"""Throughput of one live detector on Kafka, both engines, next to a bare consumer (the ceiling).

Drain: fresh telemetry topics are pre-filled with --seconds of a synthetic cluster (2,048
nodes x 8 GPUs, four 4,096-rank jobs, one gpu_sample per GPU, one heartbeat per node and one
worker_step per rank each second: ~34.8k events/s), then drained by (a) a bare
confluent-kafka consumer with pydantic validation, (b) the same plus LiveDetector and the
detection core, (c) the detector's consumer engine (`streams.service`, a subprocess, with its
producer and checkpoints), (d) one worker of the Faust engine (`streams.app.build_app`), (e) one
Faust worker whose agent only counts the events (Faust's own ceiling on this machine).
Sustained: for each engine and each --rates R, a cluster of about R/17 nodes is produced live
at 1 Hz for --run-s seconds into fresh topics with a fresh detector; lag = events produced but
not yet processed, in seconds of input. The highest R with lag < 1 s is its sustained rate.

    python bench/detector_live.py [--seconds 6] [--rates 2500,...] [--run-s 20] [--engines consumer,faust]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from bus.admin import create_topics
from bus.settings import KafkaSettings
from schemas.codec import TELEMETRY, decode
from schemas.topics import BY_SUFFIX, adapter
from streams.core import Detector
from streams.live import LiveDetector

GPUS, JOBS = 8, 4
TELEMETRY_PARTITIONS = sum(BY_SUFFIX[name].partitions for name in ("telemetry.gpu", "telemetry.node",
                                                                    "telemetry.worker"))
EVENTS_PER_NODE = 1 + 2 * GPUS  # heartbeat, gpu samples, rank steps
GPU = ('{"type":"gpu_sample","v":1,"ts":%.3f,"node":"%s","gpu":%d,"uuid":"GPU-%s-%d","util":97.0,'
       '"mem_used_mb":70000.0,"mem_total_mb":81559.0,"temp_c":%.1f,"power_w":612.5,"ecc_sbe":0,'
       '"ecc_dbe":0,"nvlink_errors":0,"xids":[],"throttle":[]}')
BEAT = '{"type":"node_heartbeat","v":1,"ts":%.3f,"node":"%s","interval":1.0,"links":[]}'
STEP = ('{"type":"worker_step","v":1,"ts":%.3f,"node":"%s","job":"%s","rank":%d,"world_size":%d,'
        '"generation":0,"pid":%d,"step":%d,"step_time":%.3f}')


def cluster_second(topics, nodes: int, t: int, base: float) -> list[tuple[str, str, bytes]]:
    """One second of telemetry of `nodes` nodes (a multiple of 4), as (topic, key, value), ts order."""
    per_job = nodes // JOBS
    out = []
    for n in range(nodes):
        ts, node = base + t + n / nodes, f"node-{n:05d}"
        out.append((topics.node, node, (BEAT % (ts, node)).encode()))
        for g in range(GPUS):
            out.append((topics.gpu, node, (GPU % (ts, node, g, node, g, 60.0 + g)).encode()))
        job, first = divmod(n, per_job)
        for g in range(GPUS):
            rank = first * GPUS + g
            out.append((topics.worker, f"job-{job}", (STEP % (
                ts, node, f"job-{job}", rank, per_job * GPUS, 1000 + rank, t, 0.98 + 0.01 * (rank % 5),
            )).encode()))
    return out


def fresh_topics(bootstrap: str, run: str) -> KafkaSettings:
    settings = KafkaSettings.from_env(role="admin", bootstrap=bootstrap, topic_prefix=f"{run}.")
    create_topics(settings)
    return settings


def producer(settings: KafkaSettings) -> Producer:
    """Configured as trainmedic's producers are (EventProducer), with room for a pre-fill."""
    return Producer(settings.client_config(**{
        "enable.idempotence": True, "acks": "all", "linger.ms": 5, "compression.type": "lz4",
        "queue.buffering.max.messages": 1_000_000,
    }))


def prefill(settings: KafkaSettings, nodes: int, seconds: int) -> int:
    out, count = producer(settings), 0
    for t in range(seconds):
        for topic, key, value in cluster_second(settings.topics, nodes, t, 1_700_000_000.0):
            while True:
                try:
                    out.produce(topic, value, key)
                    break
                except BufferError:
                    out.poll(0.05)
            count += 1
        out.poll(0)
    if out.flush(120):
        raise RuntimeError("pre-fill not delivered")
    return count


def drain(settings: KafkaSettings, total: int, live: LiveDetector | None) -> float:
    """Seconds a bare consumer takes to read and validate `total` events (and feed `live`)."""
    topics = settings.topics
    client = Consumer(settings.client_config(**{"group.id": "unused", "enable.auto.commit": False}))
    meta = client.list_topics(timeout=10)
    client.assign([TopicPartition(name, p, OFFSET_BEGINNING)
                   for name in (topics.gpu, topics.node, topics.worker)
                   for p in meta.topics[name].partitions])
    validators = {name: adapter(spec.suffix) for name, spec in topics.all().items()}
    seen, start = 0, time.perf_counter()
    while seen < total:
        for msg in client.consume(2000, 0.05):  # a long wait would count against the tail
            if msg.error():
                continue
            event = decode(msg.value(), validators[msg.topic()])
            if live is not None:
                live.feed(event, (msg.topic(), msg.partition()), time.time())
            seen += 1
    elapsed = time.perf_counter() - start
    client.close()
    return elapsed


class Worker:
    """`python bench/detector_live.py --worker MODE APP_ID`: a detector of one engine (or, with
    `noop`, a Faust agent that only counts) plus a twice-a-second report on stdout."""

    def __init__(self, settings: KafkaSettings, run: str, home: Path, mode: str) -> None:
        env = {**os.environ, "TRAINMEDIC_KAFKA_BOOTSTRAP": settings.bootstrap,
               "TRAINMEDIC_TOPIC_PREFIX": settings.topic_prefix, "TRAINMEDIC_HOME": str(home)}
        self.log = home / f"{run}-{mode}.log"
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", mode, f"{run}-{mode}"], env=env,
                                     stdout=subprocess.PIPE, stderr=self.log.open("w"), text=True)
        self.reports: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):  # Faust may print too
                self.reports.append(json.loads(line))

    def wait(self, until, give_up_s: float = 300.0) -> dict:
        deadline = time.monotonic() + give_up_s
        while time.monotonic() < deadline:
            if self.reports and until(self.reports[-1]):
                return self.reports[-1]
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"worker gave up; its log:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def report(events: int, assigned: int, buffered: int) -> None:
    print(json.dumps({"wall": time.time(), "events": events, "assigned": assigned, "buffered": buffered}),
          flush=True)


def run_consumer_worker(app_id: str) -> None:
    """The consumer engine as `trainmedic detector` runs it, from the earliest offsets."""
    import logging

    from bus.signals import stop_on_signals
    from streams.pipeline import Pipeline
    from streams.service import DetectorService, ServiceConfig, tune_gc

    tune_gc()
    logging.basicConfig(level=logging.WARNING)
    settings = KafkaSettings.from_env(role="admin")
    pipeline = Pipeline(settings.topics, LiveDetector(Detector()))
    service = DetectorService(settings, pipeline, ServiceConfig(app_id=app_id, start="earliest"))
    stop = threading.Event()

    def reports() -> None:
        while not stop.wait(0.5):
            report(pipeline.stats.events, len(service.offsets), pipeline.live.buffered)

    threading.Thread(target=reports, daemon=True).start()
    with stop_on_signals(stop):
        service.run(stop.is_set)


def run_faust_worker(app_id: str) -> None:
    from streams.app import build_app
    from streams.cli import run_worker as run_faust

    settings = KafkaSettings.from_env(role="admin")
    detector = build_app(settings, app_id=app_id, datadir=os.environ["TRAINMEDIC_HOME"])
    app, stats, live = detector.app, detector.stats, detector.live
    telemetry = {settings.topics.gpu, settings.topics.node, settings.topics.worker}

    @app.timer(interval=0.5)
    async def reports():
        report(stats.events, sum(tp.topic in telemetry for tp in app.consumer.assignment()), live.buffered)

    run_faust(app, "warning")


def run_noop_worker(app_id: str) -> None:
    """A Faust app with the detector's topic settings whose agent only counts what it reads."""
    import faust

    from streams.cli import run_worker as run_faust

    settings = KafkaSettings.from_env(role="admin")
    topics = settings.topics
    app = faust.App(app_id, broker=f"kafka://{settings.bootstrap}", store="memory://", web_enabled=False,
                    topic_disable_leader=True, datadir=os.environ["TRAINMEDIC_HOME"],
                    broker_max_poll_records=2000, stream_buffer_maxsize=16384)
    telemetry = app.topic(topics.gpu, topics.node, topics.worker, value_serializer="raw",
                          key_serializer="raw")
    count = {"events": 0}

    @app.agent(telemetry)
    async def process(stream):
        async for _ in stream.events():
            count["events"] += 1

    @app.timer(interval=0.5)
    async def reports():
        report(count["events"], 0, 0)

    run_faust(app, "warning")


def worker_drain(settings: KafkaSettings, run: str, home: Path, total: int, mode: str) -> tuple[float, int]:
    """(drain s from the first report with events to the one with all, events drained in that time)."""
    worker = Worker(settings, run, home, mode)
    try:
        first = worker.wait(lambda r: r["events"] > 0)
        done = worker.wait(lambda r: r["events"] >= total)
    finally:
        worker.stop()
    return done["wall"] - first["wall"], total - first["events"]


def sustained(bootstrap: str, mode: str, rate: int, run_s: int, home: Path) -> dict:
    """Produce a cluster of ~rate/17 nodes at 1 Hz live; the worker's lag, in seconds of input."""
    run = f"bench-{uuid.uuid4().hex[:8]}"
    settings = fresh_topics(bootstrap, run)
    nodes = max(JOBS, round(rate / EVENTS_PER_NODE / JOBS) * JOBS)
    worker = Worker(settings, run, home, mode)
    out, produced, sent = producer(settings), 0, []
    try:
        worker.wait(lambda r: r["assigned"] == TELEMETRY_PARTITIONS)
        start = time.time()
        slices = 20
        for t in range(run_s):
            second = cluster_second(settings.topics, nodes, t, start)
            step = -(-len(second) // slices)
            for k in range(slices):
                for topic, key, value in second[k * step:(k + 1) * step]:
                    out.produce(topic, value, key)
                produced += len(second[k * step:(k + 1) * step])
                out.poll(0)
                sent.append((time.time(), produced))
                pause = start + t + (k + 1) / slices - time.time()
                if pause > 0:
                    time.sleep(pause)
        produce_end = time.time()
        produce_s = produce_end - start
        out.flush(60)
        try:
            done = worker.wait(lambda r: r["events"] >= produced, give_up_s=60)["wall"]
            caught_up = max(0.0, done - produce_end)  # a report can come before the last flush returns
        except RuntimeError:
            caught_up = None
    finally:
        worker.stop()
        delete_topics(bootstrap, run)
    lags = []
    for report in worker.reports:
        if start <= report["wall"] <= start + produce_s:
            before = [count for wall, count in sent if wall <= report["wall"]]
            lags.append(((before[-1] if before else 0) - report["events"]) / (produced / produce_s))
    return {"nodes": nodes, "rate": produced / produce_s, "max_lag_s": max(lags),
            "median_lag_s": statistics.median(lags), "catch_up_s": caught_up}


def delete_topics(bootstrap: str, run: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [name for name in admin.list_topics(timeout=10).topics if name.startswith(run)]
    if names:
        for future in admin.delete_topics(names, operation_timeout=30).values():
            future.result()


WORKERS = {"consumer": run_consumer_worker, "faust": run_faust_worker, "noop": run_noop_worker}
DRAINERS = (
    ("consumer", "(c) detector, consumer engine:    ", "trainmedic detector"),
    ("faust", "(d) detector, Faust engine:       ", "trainmedic detector --engine faust"),
    ("noop", "(e) Faust worker, no-op agent:    ", "Faust's own ceiling here"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=6, help="simulated seconds pre-filled for the drain")
    parser.add_argument("--nodes", type=int, default=2048, help="nodes of the drained cluster (x4)")
    parser.add_argument("--rates", default="2500,5000,10000,20000,35000,50000", help="events/s to sustain")
    parser.add_argument("--run-s", type=int, default=20, help="seconds each rate is produced")
    parser.add_argument("--engines", default="consumer,faust", help="engines to measure sustained rates of")
    parser.add_argument("--skip-drain", action="store_true", help="only the sustained rates")
    parser.add_argument("--worker", nargs=2, metavar=("MODE", "APP_ID"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        mode, app_id = args.worker
        WORKERS[mode](app_id)
        return
    bootstrap = KafkaSettings.from_env().bootstrap
    for line in cluster_second(KafkaSettings().topics, JOBS, 0, 0.0):
        decode(line[2], TELEMETRY)  # the synthetic events are valid contract events
    with tempfile.TemporaryDirectory(prefix="bench-detector-") as tmp:
        measure(args, bootstrap, Path(tmp))


def measure(args: argparse.Namespace, bootstrap: str, home: Path) -> None:
    print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} "
          f"(1/5/15 min), {os.cpu_count()} cores")
    if not args.skip_drain:
        run = f"bench-{uuid.uuid4().hex[:8]}"
        settings = fresh_topics(bootstrap, run)
        try:
            total = prefill(settings, args.nodes, args.seconds)
            print(f"drain: {total:,} events pre-filled ({args.nodes} nodes x {GPUS} GPUs, "
                  f"{args.seconds} simulated s)")
            took = drain(settings, total, None)
            print(f"(a) consumer + validation:        {total / took:>9,.0f} events/s  ({took:5.2f} s)")
            live = LiveDetector(Detector())
            took = drain(settings, total, live)
            print(f"(b) consumer + validation + core: {total / took:>9,.0f} events/s  ({took:5.2f} s)")
            for mode, label, what in DRAINERS:
                took, counted = worker_drain(settings, run, home, total, mode)
                if took > 0:
                    print(f"{label}{counted / took:>9,.0f} events/s  ({took:5.2f} s for {counted:,}): {what}")
                else:
                    print(f"{label}drained before it reported twice; pre-fill more")
        finally:
            delete_topics(bootstrap, run)
    for engine in (e for e in args.engines.split(",") if e):
        best = None
        for rate in (int(r) for r in args.rates.split(",") if r):
            got = sustained(bootstrap, engine, rate, args.run_s, home)
            after = "not within 60 s" if got["catch_up_s"] is None else f"{got['catch_up_s']:.1f} s"
            print(f"{engine:>8} sustained {rate:>6,}/s: {got['nodes']:>5} nodes, "
                  f"produced {got['rate']:>7,.0f} events/s for {args.run_s} s, "
                  f"max lag {got['max_lag_s']:5.2f} s (median {got['median_lag_s']:.2f}), "
                  f"caught up {after} after")
            if got["max_lag_s"] >= 1.0:
                break  # higher rates lag more
            best = got["rate"]
        print(f"{engine:>8}: highest sustained rate with lag < 1 s: "
              + ("none measured" if best is None else f"{best:,.0f} events/s"))
    print(f"load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
