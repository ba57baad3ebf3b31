"""Throughput of one live detector on Kafka, both engines, next to a bare consumer (the ceiling).

Drain: fresh telemetry topics are pre-filled with --seconds of a synthetic cluster (2,048
nodes x 8 GPUs, four 4,096-rank jobs, one gpu_sample per GPU, one heartbeat per node and one
worker_step per rank each second: ~34.8k events/s), then drained by (a) a bare
confluent-kafka consumer with validation (the contract's pydantic models, then the detector's
own msgspec decoder: the ceiling; measured again just before each engine's drain, and each
engine's rate is given as a share of that, since this shared machine's speed drifts), (b) the latter plus
LiveDetector and the detection core (also as a share of the ceiling just before; it orders only the
partitions it has seen, where an engine expects every partition with a backlog and so holds far
more of it: not a bound on an engine's drain), (c) the detector's consumer engine
(`trainmedic.streams.engines.consumer`, a
subprocess, with its producer and checkpoints), (d) one worker of the Faust engine
(`trainmedic.streams.engines.faust_app.build_app`), (e) one Faust worker whose agent only counts the
events (Faust's own
ceiling on this machine); (d) and (e) each twice, as tuned (`FaustTuning()`: on uvloop) and as
before issue 18 (`-plain`: asyncio's own loop, the same fetch settings). Each engine's line also
gives the most it held and had waiting (sampled every 0.5 s), how many it released early, out
of order (streams/live.py: `order_at`, `pause_at`, `max_buffered`), and the incidents it had decided
once it had read everything: the cluster is healthy, so every one is false. (a) also once with
the last pause_at + order_at events read kept in memory with their messages, as a detector
reading a backlog in event-time order holds them: what holding costs, apart from any rule.
The bench's own process collects garbage as the detector does (`tune_gc`).
Sustained: for each engine and each --rates R, a cluster of about R/17 nodes is produced live
at 1 Hz for --run-s seconds into fresh topics with a fresh detector; lag = events produced but
not yet processed, in seconds of input. Each line also says the most the detector held (and had
waiting), how many it released early, out of order (read in time is not decided in order), and
its incidents once caught up (all false). The highest R with lag < 1 s, none released early and no
incident is its sustained rate.
Each line also gives the CPU time per event of the producer (this process), of the worker and
of the broker: all three share the machine's cores. After the drain, a paper projection for
100,000 GPUs from this run's figures (instances, partitions, state per instance).

The bench starts a broker of its own (secure, on free ports, in a temporary TRAINMEDIC_HOME,
with the Kafka jars already fetched under TRAINMEDIC_HOME) and stops it at the end, so the
topics tests and demos leave on a long-lived broker do not slow it; --bootstrap uses a running
one instead, with the admin's credentials found as for any trainmedic client.

    python bench/detector_live.py [--seconds 6] [--rates 2500,...] [--run-s 20]
        [--engines consumer,faust-plain,faust] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from harness.detector_workers import WORKERS
from harness.synthetic_telemetry import (
    EVENTS_PER_NODE,
    GPUS,
    JOBS,
    TELEMETRY_PARTITIONS,
    cluster_second,
    delete_run,
    fresh_topics,
    prefill,
    producer,
    tagger,
)
from harness.worker_process import Worker, cpu_s

from trainmedic.bus import settings as bus_settings
from trainmedic.bus.message import RawMessage
from trainmedic.bus.settings import KafkaSettings
from trainmedic.local.broker import LocalBroker
from trainmedic.local.cluster import free_port_pair
from trainmedic.schemas.codec import TELEMETRY, decode
from trainmedic.schemas.topics import adapter
from trainmedic.schemas.wire import decode_telemetry as decode_fast
from trainmedic.streams.core import Detector
from trainmedic.streams.engines.consumer import READING, tune_gc
from trainmedic.streams.live import LiveConfig, LiveDetector


@contextmanager
def own_broker(home: Path) -> Iterator[tuple[str, int]]:
    """A secure broker of the bench's own under `home` on free ports, as (bootstrap, pid); this
    process and its workers authenticate as its admin. Stopped when done; its Kafka jars are the
    ones under TRAINMEDIC_HOME (linked, fetched there once if missing)."""
    jars = bus_settings.home() / "kafka"
    jars.mkdir(parents=True, exist_ok=True)
    (home / "kafka").symlink_to(jars, target_is_directory=True)
    broker = LocalBroker(home, port=free_port_pair())
    state, _ = broker.start(prefixes=())  # the admin, a super user, needs no ACLs
    os.environ.pop("TRAINMEDIC_KAFKA_CONFIG", None)
    os.environ["TRAINMEDIC_CREDENTIALS_DIR"] = str(broker.credentials)
    try:
        yield state.bootstrap, state.pid
    finally:
        broker.stop()


def drain(settings: KafkaSettings, total: int, live: LiveDetector | None, fast: bool = True,
          keep: int = 0, held: list[int] | None = None) -> float:
    """Seconds a bare consumer takes to read and validate `total` events (and feed `live`): with
    the detector's own decoder (`fast`: schemas/wire.py), or the contract's pydantic models. With
    `keep`, the last `keep` events read stay in memory as the detector holds them, with their
    messages, and no rule runs. `held` gets the most `live` held and had waiting."""
    topics = settings.topics
    client = Consumer(settings.client_config(**{"group.id": "unused", "enable.auto.commit": False,
                                                **READING}))  # as the engine reads
    meta = client.list_topics(timeout=10)
    client.assign([TopicPartition(name, p, OFFSET_BEGINNING)
                   for name in (topics.gpu, topics.node, topics.worker)
                   for p in meta.topics[name].partitions])
    validators = {name: adapter(spec.suffix) for name, spec in topics.all().items()}
    assert not (keep and live), "keep: with no LiveDetector, which holds what it holds"
    kept: deque = deque(maxlen=keep or None)
    seen, most, start = 0, 0, time.perf_counter()
    while seen < total:
        runs: dict[tuple, list] = {}  # as the detector feeds LiveDetector: a run per partition
        for msg in client.consume(2000, 0.05):  # a long wait would count against the tail
            if msg.error():
                continue
            event = decode_fast(msg.value()) if fast else decode(msg.value(), validators[msg.topic()])
            if live is not None:
                runs.setdefault((msg.topic(), msg.partition()), []).append((event.ts, event, None))
            elif keep:
                kept.append((event.ts, event, RawMessage.of(msg)))
            seen += 1
        if runs:
            live.feed_many(list(runs.items()), time.time())
            most = max(most, live.buffered)
    elapsed = time.perf_counter() - start
    if held is not None:
        held.append(most)
    client.close()
    return elapsed


def worker_drain(settings: KafkaSettings, run: str, home: Path, total: int, mode: str) -> dict:
    """The drain from the first report with events to the one with all: its seconds, the events
    drained in that time, the worker's CPU seconds meanwhile and its event loop."""
    worker = Worker(settings, run, home, mode)
    try:
        first = worker.wait(lambda r: r["events"] > 0)
        began, own = worker.cpu_s(), worker.own_cpu_s()
        done = worker.wait(lambda r: r["events"] >= total)
        cpu, own = worker.cpu_s() - began, worker.own_cpu_s() - own
    finally:
        worker.stop()
    return {"took_s": done["wall"] - first["wall"], "events": total - first["events"], "cpu_s": cpu,
            "own_cpu_s": own, "loop": done["loop"], "forced": done["forced"], "incidents": done["incidents"],
            "most_held": max(r["buffered"] for r in worker.reports)}


def sustained(bootstrap: str, mode: str, rate: int, run_s: int, home: Path, broker_pid: int | None) -> dict:
    """Produce a cluster of ~rate/17 nodes at 1 Hz live; the worker's lag, in seconds of input, and
    the CPU seconds per event of the producer, the worker and the broker (None: not ours)."""
    run = f"bench-{uuid.uuid4().hex[:8]}"
    settings = fresh_topics(bootstrap, run)
    nodes = max(JOBS, round(rate / EVENTS_PER_NODE / JOBS) * JOBS)
    worker = Worker(settings, run, home, mode, settle=True)
    out, produced, sent, tags = producer(settings), 0, [], tagger(settings)
    try:
        worker.wait(lambda r: r["assigned"] == TELEMETRY_PARTITIONS)
        start = time.time()
        cpu_before = (time.process_time(), worker.cpu_s(), broker_pid and cpu_s(broker_pid),
                      worker.own_cpu_s())
        slices = 20
        for t in range(run_s):
            second = cluster_second(settings.topics, nodes, t, start)
            step = -(-len(second) // slices)
            for k in range(slices):
                for topic, key, value, node in second[k * step:(k + 1) * step]:
                    out.produce(topic, value, key, headers=tags(topic, value, node))
                produced += len(second[k * step:(k + 1) * step])
                out.poll(0)
                sent.append((time.time(), produced))
                pause = start + t + (k + 1) / slices - time.time()
                if pause > 0:
                    time.sleep(pause)
        produce_end = time.time()
        produce_s = produce_end - start
        out.flush(60)
        producer_cpu = time.process_time() - cpu_before[0]  # librdkafka's threads included
        try:
            done = worker.wait(lambda r: r["events"] >= produced, give_up_s=60)
            caught_up = max(0.0, done["wall"] - produce_end)  # a report may come before the flush returns
        except RuntimeError:
            done, caught_up = worker.reports[-1], None
        worker_cpu, own_cpu = worker.cpu_s() - cpu_before[1], worker.own_cpu_s() - cpu_before[3]
        broker_cpu = broker_pid and cpu_s(broker_pid) - cpu_before[2]
    finally:
        worker.stop()
        delete_run(settings, run)
    lags = []
    for report in worker.reports:
        if start <= report["wall"] <= start + produce_s:
            before = [count for wall, count in sent if wall <= report["wall"]]
            lags.append(((before[-1] if before else 0) - report["events"]) / (produced / produce_s))
    return {"nodes": nodes, "rate": produced / produce_s, "max_lag_s": max(lags),
            "median_lag_s": statistics.median(lags), "catch_up_s": caught_up,
            "producer_cpu": producer_cpu / produced, "worker_cpu": worker_cpu / produced,
            "split": decider({"cpu_s": worker_cpu, "own_cpu_s": own_cpu, "events": produced})
            if mode.startswith("sharded") else "",
            "broker_cpu": broker_cpu and broker_cpu / produced, "loop": worker.reports[-1]["loop"],
            "most_held": max(r["buffered"] for r in worker.reports), "forced": worker.reports[-1]["forced"],
            "incidents": done["incidents"]}


DRAINERS = {  # the worker modes whose drain is measured by default, in this order: their line's label, what
    "consumer": ("(c) detector, consumer engine:", "trainmedic detector"),
    "sharded-1": ("(f) sharded detector, 1 ingest:", "trainmedic detector --stage ingest x1 + decide"),
    "sharded-2": ("(f) sharded detector, 2 ingest:", "trainmedic detector --stage ingest x2 + decide"),
    "ingest-1": ("(g) ingest stage alone, 1 instance:", "trainmedic detector --stage ingest x1, no decider"),
    "ingest-2": ("(g) ingest stage alone, 2 instances:", "trainmedic detector --stage ingest x2, no decider"),
    "faust-plain": ("(d) detector, Faust engine, before:", "trainmedic detector --engine faust, before"),
    "faust": ("(d) detector, Faust engine, tuned:", "trainmedic detector --engine faust"),
    "noop-plain": ("(e) Faust no-op agent, before:", "Faust's own ceiling here, before"),
    "noop": ("(e) Faust no-op agent, tuned:", "Faust's own ceiling here"),
}


def project(engine_rate: float, state_per_node: float, sharded: dict | None, gpus: int = 100_000) -> None:
    """A paper projection, from this run's figures, of detection for `gpus` GPUs at 1 Hz: one
    consumer-engine instance's share, and a sharded detector's (its stages' CPU per event)."""
    nodes = gpus // GPUS
    rate = nodes * EVENTS_PER_NODE
    print(f"projection for {gpus:,} GPUs ({nodes:,} nodes, 1 Hz): {rate:,} events/s, "
          f"{rate / engine_rate:.1f}x what one consumer-engine instance drained here; state "
          f"{state_per_node * nodes / 1e6:.0f} MB ({state_per_node / 1e3:.1f} kB per node, as measured at "
          f"{JOBS} jobs); one job's {nodes * GPUS:,} ranks step {nodes * GPUS:,} times a second")
    if sharded is None:
        return
    decider_s = sharded["own_cpu_s"] / sharded["events"]
    ingest_s = (sharded["cpu_s"] - sharded["own_cpu_s"]) / sharded["events"]
    instances = math.ceil(rate * ingest_s / 0.5)
    print(f"  sharded: ingest {us(ingest_s)} CPU/event -> >= {instances} ingest instances at half a core "
          f"each (and >= {instances} partitions per telemetry topic); the decider {us(decider_s)} "
          f"CPU/event -> {rate * decider_s:.0%} of one core for all of it")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=6, help="simulated seconds pre-filled for the drain")
    parser.add_argument("--nodes", type=int, default=2048, help="nodes of the drained cluster (x4)")
    parser.add_argument("--rates", default="2500,5000,10000,20000,35000,50000", help="events/s to sustain")
    parser.add_argument("--run-s", type=int, default=20, help="seconds each rate is produced")
    parser.add_argument("--engines", default="consumer,faust-plain,faust",
                        help=f"worker modes to measure sustained rates of ({', '.join(WORKERS)})")
    parser.add_argument("--skip-drain", action="store_true", help="only the sustained rates")
    parser.add_argument("--drains", default=",".join(DRAINERS),
                        help="worker modes whose drain is measured, in this order")
    parser.add_argument("--bootstrap", help="a running broker to use instead of one of the bench's own")
    parser.add_argument("--worker", nargs=2, metavar=("MODE", "APP_ID"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        mode, app_id = args.worker
        WORKERS[mode](app_id)
        return
    engines = [e for e in args.engines.split(",") if e]
    if not set(engines) <= set(WORKERS):
        parser.error(f"--engines: each one of {', '.join(WORKERS)}")
    for line in cluster_second(KafkaSettings().topics, JOBS, 0, 0.0):
        decode(line[2], TELEMETRY)  # the synthetic events are valid contract events
    with tempfile.TemporaryDirectory(prefix="bench-detector-") as tmp:
        if args.bootstrap:
            measure(args, engines, args.bootstrap, None, Path(tmp))
            return
        print("starting a broker of the bench's own ...", flush=True)
        with own_broker(Path(tmp)) as (bootstrap, pid):
            print(f"broker at {bootstrap} (pid {pid})", flush=True)
            measure(args, engines, bootstrap, pid, Path(tmp))


def measure(args: argparse.Namespace, engines: list[str], bootstrap: str, broker_pid: int | None,
            home: Path) -> None:
    tune_gc()  # (a), kept, and (b) hold events here as the engines do, with the engines' collection
    print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} "
          f"(1/5/15 min), {os.cpu_count()} cores")
    if not args.skip_drain:
        run = f"bench-{uuid.uuid4().hex[:8]}"
        settings = fresh_topics(bootstrap, run)
        try:
            began = time.process_time()
            total = prefill(settings, args.nodes, args.seconds)
            print(f"drain: {total:,} events pre-filled ({args.nodes} nodes x {GPUS} GPUs, "
                  f"{args.seconds} simulated s), producer {us(time.process_time() - began, total)} CPU/event")
            took = drain(settings, total, None, fast=False)
            print(f"(a) consumer + pydantic validation: {total / took:>9,.0f} events/s  ({took:5.2f} s)")
            took = drain(settings, total, None)
            ceiling = total / took
            print(f"(a) consumer + validation:          {ceiling:>9,.0f} events/s  ({took:5.2f} s): the "
                  "ceiling, with the detector's decoder (msgspec, schemas/wire.py)")
            ceiling = total / drain(settings, total, None)  # again just before, as for each engine below
            most = LiveConfig().pause_at + LiveConfig().order_at
            took = drain(settings, total, None, keep=most)
            print(f"(a) consumer + validation, kept:    {total / took:>9,.0f} events/s  ({took:5.2f} s), "
                  f"{total / took / ceiling:.2f}x the ceiling ({ceiling / 1000:,.0f}k just before): the last "
                  f"{min(most, total):,} events read kept in memory with their messages, as a detector "
                  "reading a backlog in event-time order holds them (up to pause_at + order_at), no rule run")
            ceiling = total / drain(settings, total, None)
            live = LiveDetector(Detector())
            held: list[int] = []
            took = drain(settings, total, live, held=held)
            print(f"(b) consumer + validation + core:   {total / took:>9,.0f} events/s  ({took:5.2f} s), "
                  f"{total / took / ceiling:.2f}x the ceiling ({ceiling / 1000:,.0f}k just before), "
                  f"held at most {held[0]:,}: the core and LiveDetector on what this consumer reads, "
                  "ordering only the partitions it has seen (an engine expects every partition with a "
                  "backlog, and holds more)")
            state_per_node = len(live.detector.state.to_msgpack()) / args.nodes
            engine_rate, sharded = None, None
            for mode in dict.fromkeys(m for m in args.drains.split(",") if m in DRAINERS):
                label, what = DRAINERS[mode]
                # This machine's speed drifts between minutes: the ceiling again, just before each
                # engine, is what its ratio is taken to.
                ceiling = total / drain(settings, total, None)
                got = worker_drain(settings, run, home, total, mode)
                if got["took_s"] > 0:
                    rate = got["events"] / got["took_s"]
                    engine_rate = rate if mode == "consumer" else engine_rate
                    sharded = got if mode == "sharded-1" else sharded
                    split = decider(got) if mode.startswith("sharded") else ""
                    print(f"{label:36}{rate:>9,.0f} events/s  ({got['took_s']:5.2f} s "
                          f"for {got['events']:,}), {rate / ceiling:.2f}x the ceiling "
                          f"({ceiling / 1000:,.0f}k just before), worker {us(got['cpu_s'], got['events'])} "
                          f"CPU/event{split}, held at most {got['most_held']:,} ({got['forced']:,} released "
                          f"early){incidents(got)}, loop {got['loop']}: {what}")
                else:
                    print(f"{label:36}drained before it reported twice; pre-fill more")
            if engine_rate is not None:
                project(engine_rate, state_per_node, sharded)
        finally:
            delete_run(settings, run)
    best: dict[str, float | None] = dict.fromkeys(engines)
    lagging: set[str] = set()
    for rate in (int(r) for r in args.rates.split(",") if r):
        for engine in (e for e in engines if e not in lagging):
            got = sustained(bootstrap, engine, rate, args.run_s, home, broker_pid)
            after = "not within 60 s" if got["catch_up_s"] is None else f"{got['catch_up_s']:.1f} s"
            broker = "" if got["broker_cpu"] is None else f", broker {us(got['broker_cpu'])}"
            print(f"{engine:>11} sustained {rate:>6,}/s: {got['nodes']:>5} nodes, "
                  f"produced {got['rate']:>7,.0f} events/s for {args.run_s} s, "
                  f"max lag {got['max_lag_s']:5.2f} s (median {got['median_lag_s']:.2f}), "
                  f"caught up {after} after, held at most {got['most_held']:,} ({got['forced']:,} released "
                  f"early){incidents(got)}; CPU/event: producer {us(got['producer_cpu'])}, "
                  f"worker {us(got['worker_cpu'])}{got['split']}{broker}")
            if got["max_lag_s"] >= 1.0 or got["forced"] or got["incidents"]:
                lagging.add(engine)  # higher rates lag more
            else:
                best[engine] = got["rate"]
    for engine, rate in best.items():
        print(f"{engine:>11}: highest sustained rate with lag < 1 s, none released early, no incident: "
              + ("none measured" if rate is None else f"{rate:,.0f} events/s"))
    print(f"load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


def incidents(got: dict) -> str:
    """The incidents a worker that decides had decided once it had read everything (the cluster is
    healthy: each is false; what it still held, the last ~lateness_s of input, not yet decided)."""
    return "" if got["incidents"] is None else f", {got['incidents']} incidents"


def decider(got: dict) -> str:
    """A sharded detector's decider's own share of the worker's CPU."""
    if got["own_cpu_s"] >= got["cpu_s"] * 0.999:
        return ""
    ingest = got["cpu_s"] - got["own_cpu_s"]
    return f" (decider {us(got['own_cpu_s'], got['events'])}, ingest {us(ingest, got['events'])})"


def us(cpu_s: float, events: int = 1) -> str:
    """CPU seconds per event, in microseconds."""
    return f"{cpu_s / events * 1e6:.1f} µs"


if __name__ == "__main__":
    main()
