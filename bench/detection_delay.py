"""Detection delay: over the scenario recordings (tests/scenarios), or live against a broker.

Scenarios: for every incident opened, ts - first_ts (the incident's own view: decision time minus its
earliest evidence) and, where the scenario knows when the fault happened, ts - fault_ts against the
scenario's target.

Live (--live): a detector (the consumer engine, in a subprocess) per arm on fresh topics of its own,
fed the same small cluster at once, as `trainmedic run` runs one: nodes with 1 Hz heartbeats (and
samples of --gpus GPUs each), and per fault, at a random point between two heartbeats, a new job of
one rank per node failing: "exit" (every rank exits with code 1, a script broken at import), "signal"
(every rank is killed by SIGABRT, as a CUDA error in a C++ thread aborts it) and "exception" (every
rank raises, then exits). Per phase, the median over the faults, from the job's
first evidence: its own ts -> on Kafka (the broker's append time) -> read by the detector -> fed to
the core by the event-time ordering (the watermark) -> decided (the correlation hold) -> the incident
readable on Kafka; `kafka>out` is the whole (its range too), `last>out` the same from the job's last
evidence on Kafka. --before DIR adds an arm running the package copy in DIR/trainmedic (e.g. the tree
before a change), side by side in the same run.

    python bench/detection_delay.py
    python bench/detection_delay.py --live [--faults 7] [--nodes 2] [--gpus 0] [--before DIR]
        [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer

from trainmedic.bus.admin import create_topics, remove_prefix
from trainmedic.bus.settings import KafkaSettings
from trainmedic.schemas.codec import encode
from trainmedic.schemas.telemetry import GpuSample, NodeHeartbeat, WorkerExited, WorkerFailed, WorkerStarted
from trainmedic.streams.core import Detector
from trainmedic.streams.engines.consumer import DetectorService, ServiceConfig, tune_gc
from trainmedic.streams.live import LiveDetector
from trainmedic.streams.pipeline import Pipeline
from trainmedic.streams.replay import read_events, replay

SCENARIOS = Path(__file__).resolve().parent.parent / "tests" / "scenarios"


def rows() -> list[tuple]:
    out = []
    for expected_path in sorted(SCENARIOS.glob("*.expected.json")):
        name = expected_path.name.removesuffix(".expected.json")
        expected = json.loads(expected_path.read_text())["incidents"]
        with (SCENARIOS / f"{name}.jsonl").open() as lines:
            incidents = replay(read_events(lines, io.StringIO()))
        for incident, want in zip(incidents, expected, strict=False):
            if incident.status != "open":
                continue
            fault = want.get("fault_ts")
            out.append((incident.category, name, incident.ts - incident.first_ts,
                        None if fault is None else incident.ts - fault, want.get("max_delay_s")))
    return out


def scenarios() -> None:
    print(f"{'category':<15} {'scenario':<27} {'ts-first_ts':>11} {'ts-fault':>9} {'target':>7}")
    for category, name, own, fault, target in sorted(rows()):
        fault_s = "" if fault is None else f"{fault:.2f}"
        target_s = "" if target is None else f"<={target:.1f}"
        print(f"{category:<15} {name:<27} {own:>11.2f} {fault_s:>9} {target_s:>7}")


# -- live, against a broker ------------------------------------------------------------------

EVIDENCE = {"WorkerExited": "worker_exit", "WorkerFailed": "worker_error"}  # model (or its twin) -> type
PHASES = (  # (column, from, to): instants of one fault (`phases`)
    ("ts>kafka", "ts", "kafka"), ("kafka>read", "kafka", "read"), ("read>fed", "read", "fed"),
    ("fed>decided", "fed", "decided"), ("decided>out", "decided", "out"),
    ("kafka>out", "kafka", "out"), ("last>out", "last_kafka", "out"),
)


def emit(kind: str, **fields) -> None:
    print(json.dumps({"kind": kind, **fields}), flush=True)


def key(job: str, kind: str, rank: int) -> str:
    return f"{job}|{kind}|{rank}"


def worker(prefix: str) -> None:
    """One detector (the consumer engine, as `trainmedic detector` runs it) on `prefix`'s topics until
    its stdin closes, its hot path watched: each evidence event read and fed to the core, each incident
    decided, as JSON lines on stdout."""
    tune_gc()
    settings = KafkaSettings.from_env(role="admin", topic_prefix=prefix)
    pipeline = Pipeline(settings.topics, LiveDetector(Detector()))
    service = DetectorService(settings, pipeline, ServiceConfig(app_id=f"{prefix}detector", start="earliest"))
    on_fetch, apply, publish, start = (pipeline.on_fetch, pipeline.live.detector._apply, pipeline._publish,
                                       service._start)

    def fetched(messages, wall, offsets, on_error):
        for msg in messages:
            value = msg.value() or b""
            if msg.error() is None and (b"worker_exit" in value or b"worker_error" in value):
                event = json.loads(value)
                emit("read", key=key(event["job"], event["type"], event["rank"]), ts=event["ts"], wall=wall,
                     kafka=msg.timestamp()[1] / 1000)
        return on_fetch(messages, wall, offsets, on_error)

    def applied(event):
        kind = EVIDENCE.get(type(event).__name__.removeprefix("Trusted"))
        if kind is not None:
            emit("fed", key=key(event.job, kind, event.rank), wall=time.time())
        return apply(event)

    def published(incidents):
        for incident in incidents:
            emit("decided", job=incident.job, wall=time.time(), status=str(incident.status),
                 category=incident.category)
        return publish(incidents)

    def started():
        start()
        emit("ready")

    pipeline.on_fetch, pipeline.live.detector._apply, pipeline._publish, service._start = (
        fetched, applied, published, started)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    service.run(stop.is_set)


class Arm:
    """One detector under test on topics of its own: a subprocess running the package in `code`
    (None: this tree's), and what it reported."""

    def __init__(self, name: str, settings: KafkaSettings, code: str | None) -> None:
        self.name, self.settings, self.records, self.cpu_s = name, settings, [], 0.0
        env = dict(os.environ, PYTHONPATH=code) if code else dict(os.environ)
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker",
                                      settings.topics.prefix], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env, cwd="/" if code else None)
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            record = json.loads(line)
            if record["kind"] == "ready":
                self.ready.set()
            self.records.append(record)

    def stop(self) -> None:
        """Stop it; `cpu_s`: the CPU seconds it used, user and system."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        self.cpu_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def simulate(arms: list[Arm], faults: int, nodes: int, gpus: int, gap_s: float) -> dict[str, str]:
    """A cluster of `nodes` nodes (1 Hz heartbeats, each with a sample of its `gpus` GPUs), produced to
    every arm's topics at once; per fault, a new job of one rank per node fails: "exit" (every rank exits
    with code 1, as a script broken at import), "signal" (SIGABRT) or "exception" (every rank raises,
    then exits). Returns job -> its kind of fault."""
    producer = Producer(arms[0].settings.client_config(**{
        "enable.idempotence": True, "acks": "all", "linger.ms": 5, "compression.type": "lz4"}))
    done = threading.Event()

    def send(topic: str, event, by: str) -> None:
        for arm in arms:
            producer.produce(getattr(arm.settings.topics, topic), encode(event), key=by)
        producer.poll(0)

    def beats() -> None:
        names = [f"node-{n}" for n in range(nodes)]
        while not done.wait(1.0 / nodes):
            node = names.pop(0)
            names.append(node)
            send("node", NodeHeartbeat(ts=time.time(), node=node, interval=1.0), node)
            for gpu in range(gpus):
                send("gpu", GpuSample(ts=time.time(), node=node, gpu=gpu, temp_c=60.0, ecc_dbe=0), node)

    threading.Thread(target=beats, daemon=True).start()
    time.sleep(3.0)  # heartbeats under way, as on a running cluster
    jobs: dict[str, str] = {}
    rng = random.Random(34)
    for n in range(faults):
        for kind in ("exit", "signal", "exception"):
            time.sleep(rng.uniform(0.0, 1.0))  # a fault falls anywhere between two samples
            job = f"{kind}-{n}"
            jobs[job] = kind
            ranks = [dict(node=f"node-{r}", job=job, rank=r, world_size=nodes, pid=1000 + r)
                     for r in range(nodes)]
            if kind == "exception":
                for rank in ranks:
                    send("worker", WorkerStarted(ts=time.time(), **rank), job)
                time.sleep(1.0)
                for rank in ranks:
                    send("worker", WorkerFailed(ts=time.time(), error="ValueError: boom", **rank), job)
                time.sleep(0.05)
            how = {"signal": 6} if kind == "signal" else {"exit_code": 1}
            for rank in ranks:
                send("worker", WorkerExited(ts=time.time(), **how, **rank), job)
            producer.flush(5)
            time.sleep(gap_s)
    done.set()
    producer.flush(5)
    return jobs


def incidents_out(arm: Arm, done: threading.Event) -> dict[str, float]:
    """Per job, the wall time its first incident could be read from the arm's incidents topic, until
    `done` is set."""
    consumer = Consumer(arm.settings.client_config(**{
        "group.id": f"{arm.settings.topics.prefix}bench", "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 10}))
    consumer.subscribe([arm.settings.topics.incidents])
    seen: dict[str, float] = {}
    while not done.is_set():
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            incident = json.loads(msg.value())
            if incident["status"] == "open":
                seen.setdefault(incident["job"], time.time())
    consumer.close()
    return seen


def phases(arm: Arm, jobs: dict[str, str], out: dict[str, float]) -> dict[str, list[dict]]:
    """Per kind of fault, per fault: the instants of `PHASES`, from the job's first evidence: its own ts,
    on Kafka (the broker's append time), read by the detector, fed to the core by the ordering; the
    incident decided, and readable on Kafka (`out`); `last_kafka`: the job's last evidence on Kafka."""
    reads = {r["key"]: r for r in arm.records if r["kind"] == "read"}
    fed = {r["key"]: r["wall"] for r in arm.records if r["kind"] == "fed"}
    decided = {r["job"]: r for r in reversed(arm.records) if r["kind"] == "decided" and r["status"] == "open"}
    found: dict[str, list[dict]] = {}
    for job, kind in jobs.items():
        mine = sorted((r for k, r in reads.items() if k.startswith(f"{job}|")), key=lambda r: r["kafka"])
        if not mine or job not in out or job not in decided:
            continue
        first = mine[0]
        found.setdefault(kind, []).append({
            "ts": first["ts"], "kafka": first["kafka"], "read": first["wall"], "fed": fed[first["key"]],
            "decided": decided[job]["wall"], "out": out[job], "last_kafka": mine[-1]["kafka"],
            "category": decided[job]["category"]})
    return found


def live(args: argparse.Namespace) -> None:
    run = f"delaybench-{uuid.uuid4().hex[:8]}"
    codes = {"after": None, **({"before": str(Path(args.before).resolve())} if args.before else {})}
    arms, done = [], threading.Event()
    for name, code in codes.items():
        settings = KafkaSettings.from_env(role="admin", bootstrap=args.bootstrap,
                                          topic_prefix=f"{run}-{name}.")
        create_topics(settings)
        arms.append(Arm(name, settings, code))
    try:
        for arm in arms:
            if not arm.ready.wait(60):
                raise SystemExit(f"the {arm.name} detector did not start")
        outs: dict[str, dict[str, float]] = {}
        readers = [threading.Thread(target=lambda arm=arm: outs.update({arm.name: incidents_out(arm, done)}))
                   for arm in arms]
        for reader in readers:
            reader.start()
        jobs = simulate(arms, args.faults, args.nodes, args.gpus, args.gap_s)
        time.sleep(5.0)  # the last incidents
        done.set()
        for reader in readers:
            reader.join()
    finally:
        done.set()
        for arm in arms:
            arm.stop()
        remove_prefix(arms[0].settings, run)
    print(f"{args.faults} faults of each kind, {args.nodes} nodes x 1 rank, {args.gpus} GPUs per node; "
          "medians in seconds (from the job's first evidence); detector CPU: "
          + ", ".join(f"{arm.name} {arm.cpu_s:.1f} s" for arm in arms))
    print(f"{'arm':<7} {'fault':<10} {'n':>2} " + " ".join(f"{name:>11}" for name, _, _ in PHASES)
          + "  kafka>out range, categories")
    for arm in arms:
        for kind, found in sorted(phases(arm, jobs, outs[arm.name]).items()):
            cells = [statistics.median(f[b] - f[a] for f in found) for _, a, b in PHASES]
            whole = [f["out"] - f["kafka"] for f in found]
            categories = ",".join(sorted({f["category"] for f in found}))
            print(f"{arm.name:<7} {kind:<10} {len(found):>2} " + " ".join(f"{c:>11.3f}" for c in cells)
                  + f"  {min(whole):.2f}-{max(whole):.2f} {categories}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--live", action="store_true", help="measure live detectors on a broker")
    parser.add_argument("--faults", type=int, default=7, help="faults of each kind (live)")
    parser.add_argument("--nodes", type=int, default=2, help="nodes, one rank of each job on each (live)")
    parser.add_argument("--gpus", type=int, default=0, help="GPUs per node, sampled at 1 Hz (live)")
    parser.add_argument("--gap-s", type=float, default=4.0, help="wall time between faults (live)")
    parser.add_argument("--before", help="a directory holding trainmedic/: a second arm runs that code")
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (env TRAINMEDIC_KAFKA_BOOTSTRAP)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
    elif args.live:
        live(args)
    else:
        scenarios()


if __name__ == "__main__":
    main()
