"""What TLS costs on Kafka: the live detector's drain and the executor's publishing of its ranks'
reports, against a plain SASL broker and a TLS one, side by side in one run.

The bench starts two brokers of its own (`LocalBroker`, secure, both on 127.0.0.1 in temporary homes,
with the Kafka jars of TRAINMEDIC_HOME): one SASL_PLAINTEXT (as `trainmedic broker start`), one
SASL_SSL (as `trainmedic broker start --tls`: the CA the broker makes, hostname verification on);
this process and the workers it starts use each one's admin role file in turn. Each measurement
alternates between the two (plain first in odd rounds, TLS first in even ones); the summary gives
each side's median and the median of the rounds' own TLS / plain (the two measured next to each
other), then each round's: on a shared machine the rates move by more than TLS changes them, the CPU
per event much less.

Detector (bench/detector_live.py's drain): the same pre-filled topics (--seconds of its 2,048-node
synthetic cluster, 34,816 events a simulated second) on each broker, read once on each unmeasured
(the brokers' JIT and page cache), then in each round by (a) a bare consumer with the detector's
decoder, the ceiling, and (c) the consumer engine (`trainmedic detector`, a subprocess: its reads,
incidents and checkpoints all over that broker's protocol): events/s, and CPU per event of the
reader and of the broker.

The hook's path: a rank's hook writes its reports to a Unix socket of its node's executor (runtime/
hook.py, report_channel.py), whose report server checks them (recovery/executor/report_server.py);
none of that touches Kafka, so TLS changes neither the training step's cost (bench/hook_overhead.py)
nor the socket leg. TLS touches only the next leg: the executor's rank-report outbox
(`Outbox(EventProducer)`, as rank_reporter.py builds it: idempotent, acks=all, linger 5 ms, lz4)
publishing to telemetry.worker, measured here with those classes and checked `worker_step` reports:
a new producer's connection (TCP, with TLS the handshake, SCRAM, metadata: what an executor pays at
its start and at each reconnect), --rate reports a second for --paced-s s (a node's 8 ranks at 20
steps a second: produce-to-ack latency, by librdkafka's clock), and a burst of --burst reports
(reports/s, CPU per report of this process, librdkafka's threads included, and of the broker).

    python bench/tls_cost.py [--seconds 18] [--rounds 5] [--rate 160] [--paced-s 3] [--burst 40000]
        [--port BASE]   (plain at BASE, its controller BASE+1; TLS at BASE+2, BASE+3; default: free ports)

Measured 2026-12-06 with the defaults (1 min 45 s), this 2-core machine, quiet during the run (load
1.6 before, 1.0 after); medians of 5 rounds, and the median of the rounds' own TLS / plain:

                                              plain      TLS    TLS/plain
    detector, bare consumer drain (ceiling)    705k     575k    0.80x events/s (0.80-0.83 each round)
    detector, consumer engine drain            198k     192k    0.86x events/s (0.79-1.01: 3 s drains)
    broker CPU per event, ceiling drain        0.11     0.59    5.3x  µs
    broker CPU per event, engine drain         0.67     1.93    2.9x  µs
    reader, worker CPU per event               1.57     1.59    1.02x µs; 4.66  5.05: 1.08x
    executor: a new connection                 62.9     67.6    1.08x ms (+5 ms: the TLS handshake)
    executor: produce-to-ack, 160 reports/s    6.26     6.27    1.00x ms median; p99 12.52  12.55
    executor: burst of 40,000                  140k     140k    0.98x reports/s
    executor CPU per report (burst)            7.53     7.48    1.01x µs; broker 1.00  1.25: 1.5x

Plain, the broker hands a log's bytes to the kernel (sendfile); TLS, it reads and encrypts them: its
CPU per event read is 3-5x (still under 2 µs), and the bare consumer, which waits on its fetches,
reads 0.80x. The engine is bound by its own Python (a third of the ceiling on either side) and
drains 0.86x. The executor's reports see no change beyond the connection's handshake. Five earlier
runs the same day (fewer rounds or shorter drains; three with other work on the cores, which moved
the rates by more than TLS does): ceiling 0.65-1.25x, engine 0.81-1.30x; the CPU figures held.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from detector_live import drain, us, worker_drain
from harness.synthetic_telemetry import GPUS, fresh_topics, prefill
from harness.worker_process import cpu_s

from trainmedic.bus import settings as bus_settings
from trainmedic.bus.outbox import Outbox
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.local.broker import Listener, LocalBroker
from trainmedic.local.cluster import free_port_pair
from trainmedic.schemas import WorkerStepped
from trainmedic.streams.engines.consumer import tune_gc

RANKS = 8  # one node's


@dataclass(frozen=True)
class Side:
    """One of the two brokers: `name` "plain" or "tls", its address, its pid and its role files."""

    name: str
    bootstrap: str
    pid: int
    credentials: Path

    def use(self) -> None:
        """This broker's role files for what follows, in this process and the workers it starts."""
        os.environ.pop("TRAINMEDIC_KAFKA_CONFIG", None)
        os.environ["TRAINMEDIC_CREDENTIALS_DIR"] = str(self.credentials)


@contextmanager
def two_brokers(root: Path, port: int | None) -> Iterator[list[Side]]:
    """A SASL_PLAINTEXT broker and a SASL_SSL one on loopback, homes under `root`; stopped when done."""
    jars = bus_settings.home() / "kafka"
    jars.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        sides = []
        for k, tls in enumerate((False, True)):
            home = root / ("tls" if tls else "plain")
            home.mkdir()
            (home / "kafka").symlink_to(jars, target_is_directory=True)
            broker = LocalBroker(home, listener=Listener(port=port + 2 * k if port else free_port_pair(),
                                                         tls=tls))
            stack.callback(broker.stop)
            began = time.monotonic()
            state, _ = broker.start(prefixes=())  # the admin, a super user, needs no ACLs
            protocol = broker.listener.protocol(True)
            print(f"{protocol} broker at {state.bootstrap} (pid {state.pid}), started in "
                  f"{time.monotonic() - began:.1f} s", flush=True)
            sides.append(Side("tls" if tls else "plain", state.bootstrap, state.pid, broker.credentials))
        yield sides


def in_turn(sides: list[Side], rounds: int) -> Iterator[tuple[int, Side]]:
    """(round, side), alternating which side goes first; each side's role files in use."""
    for i in range(rounds):
        for side in sides if i % 2 == 0 else sides[::-1]:
            side.use()
            yield i, side


def detector(sides: list[Side], settings: dict[str, KafkaSettings], run: str, total: int, rounds: int,
             home: Path) -> dict[str, list[dict]]:
    """Per side and round: the bare consumer's drain (the ceiling) and the consumer engine's."""
    for _, side in in_turn(sides, 1):  # a first read of each broker, not counted: its JIT, page cache
        drain(settings[side.name], total, None)
    got: dict[str, list[dict]] = {side.name: [] for side in sides}
    for i, side in in_turn(sides, rounds):
        mine, broker = time.process_time(), cpu_s(side.pid)
        took = drain(settings[side.name], total, None)
        ceiling = {"rate": total / took, "client": (time.process_time() - mine) / total,
                   "broker": (cpu_s(side.pid) - broker) / total}
        broker = cpu_s(side.pid)
        engine = worker_drain(settings[side.name], f"{run}-{i}", home, total, "consumer")
        engine_broker = (cpu_s(side.pid) - broker) / total  # the worker's start and set-up included
        rate = engine["events"] / engine["took_s"] if engine["took_s"] > 0 else float("nan")
        got[side.name].append({"ceiling": ceiling["rate"], "engine": rate, "share": rate / ceiling["rate"],
                               "reader": ceiling["client"], "broker_ceiling": ceiling["broker"],
                               "worker": engine["cpu_s"] / engine["events"], "broker_engine": engine_broker})
        print(f"round {i + 1} {side.name:>5}: ceiling {ceiling['rate']:>8,.0f} events/s (reader "
              f"{us(ceiling['client'])}, broker {us(ceiling['broker'])} CPU/event); consumer engine "
              f"{rate:>7,.0f} events/s ({engine['took_s']:.2f} s for {engine['events']:,}, "
              f"{rate / ceiling['rate']:.2f}x the ceiling), worker {us(engine['cpu_s'], engine['events'])}, "
              f"broker {us(engine_broker)} CPU/event, {engine['incidents']} incidents", flush=True)
    return got


class TimedProducer(EventProducer):
    """The executor's producer, noting each delivered event's produce-to-ack latency (librdkafka's)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.latencies: list[float] = []

    def send(self, topic, event, key=None, *, block_s=5.0, on_delivery=None) -> None:
        def timed(err, msg) -> None:
            if err is None:
                self.latencies.append(msg.latency())
            if on_delivery is not None:
                on_delivery(err, msg)

        super().send(topic, event, key, block_s=block_s, on_delivery=timed)


def step_reports(count: int, first_step: int) -> list[WorkerStepped]:
    """`count` reports of one node's ranks, as the report server passes them on (checked, stamped)."""
    now = time.time()
    return [WorkerStepped(ts=now, node="node-00000", job="job-0", rank=i % RANKS, world_size=RANKS,
                          generation=0, pid=1000 + i % RANKS, step=first_step + i // RANKS, step_time=0.05)
            for i in range(count)]


def publish(settings: KafkaSettings, rate: float, paced_s: float, burst: int, pid: int) -> dict:
    """The executor's rank-report leg on one broker: a fresh producer's connection, paced reports'
    latency, a burst's rate and CPU per report (this process, the broker)."""
    producer = TimedProducer(settings, client_id=settings.topics.owned("executor-bench-reports"))
    outbox = Outbox(producer, what="rank reports")
    topic, paced = settings.topics.worker, step_reports(round(rate * paced_s), 1)
    began = time.perf_counter()
    producer.client.list_topics(timeout=30)  # TCP, the TLS handshake, SCRAM, metadata
    connect_s = time.perf_counter() - began
    sent = step_reports(1, 0)[0]  # the producer id and the partition's leader: not timed
    outbox.send(topic, sent, key=sent.job)
    producer.flush(30)
    producer.latencies.clear()
    began = time.perf_counter()
    for i, report in enumerate(paced):
        outbox.send(topic, report, key=report.job)
        outbox.poll()  # as rank_reporter.py does after each report
        pause = began + (i + 1) / rate - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
    producer.flush(30)
    latencies = sorted(producer.latencies)
    reports = step_reports(burst, len(paced) // RANKS + 1)
    mine, broker, began = time.process_time(), cpu_s(pid), time.perf_counter()
    for report in reports:
        outbox.send(topic, report, key=report.job)
        outbox.poll()
    producer.flush(60)
    took = time.perf_counter() - began
    got = {"connect_s": connect_s, "median_ms": statistics.median(latencies) * 1e3,
           "p99_ms": latencies[int(0.99 * (len(latencies) - 1))] * 1e3, "paced": len(latencies),
           "burst": burst / took, "cpu": (time.process_time() - mine) / burst,
           "broker": (cpu_s(pid) - broker) / burst, "dropped": outbox.dropped}
    outbox.flush(5.0)
    return got


def hook_leg(sides: list[Side], settings: dict[str, KafkaSettings], args: argparse.Namespace) -> dict:
    """Per side and round: the executor's rank-report leg (`publish`), each round a fresh producer."""
    got: dict[str, list[dict]] = {side.name: [] for side in sides}
    for i, side in in_turn(sides, args.rounds):
        one = publish(settings[side.name], args.rate, args.paced_s, args.burst, side.pid)
        got[side.name].append(one)
        print(f"round {i + 1} {side.name:>5}: connect {one['connect_s'] * 1e3:5.1f} ms (TCP"
              f"{', TLS handshake' if side.name == 'tls' else ''}, SCRAM, metadata); "
              f"{one['paced']} at {args.rate:g}/s: produce-to-ack median {one['median_ms']:.2f} ms, "
              f"p99 {one['p99_ms']:.2f} ms; burst of {args.burst:,}: {one['burst']:>7,.0f} reports/s, "
              f"executor {us(one['cpu'])}, broker {us(one['broker'])} CPU/report; {one['dropped']} dropped",
              flush=True)
    return got


def summary(what: str, got: dict[str, list[dict]], key: str, unit: str, scale: float = 1.0) -> None:
    """One line: the median of each side's `key` (times `scale`), and of TLS / plain in each round (the
    two measured next to each other), then each round's."""
    plain, tls = (statistics.median(r[key] for r in got[name]) * scale for name in ("plain", "tls"))
    shown = [f"{v:>9,.0f}" if v >= 100 else f"{v:>9.2f}" for v in (plain, tls)]
    ratios = [t[key] / p[key] if p[key] else float("nan")
              for p, t in zip(got["plain"], got["tls"], strict=True)]
    print(f"  {what:47} plain {shown[0]} {unit:9}  TLS {shown[1]} {unit:9}  TLS/plain "
          f"{statistics.median(ratios):.2f}x ({' '.join(f'{r:.2f}' for r in ratios)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=18, help="simulated seconds pre-filled for the drain")
    parser.add_argument("--nodes", type=int, default=2048, help="nodes of the drained cluster (x4)")
    parser.add_argument("--rounds", type=int, default=5, help="measurements of each side, alternating")
    parser.add_argument("--rate", type=float, default=160.0, help="paced rank reports a second")
    parser.add_argument("--paced-s", type=float, default=3.0, help="seconds of paced reports")
    parser.add_argument("--burst", type=int, default=40_000, help="reports sent as fast as they go")
    parser.add_argument("--port", type=int, help="plain broker's port (TLS: +2); default: free ports")
    args = parser.parse_args()
    tune_gc()  # the reader holds events as the engine does, with the engine's collection
    load = os.getloadavg()
    print(f"load before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (1/5/15 min), {os.cpu_count()} cores")
    run = f"bench-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as tmp, two_brokers(Path(tmp), args.port) as sides:
        settings, total = {}, 0
        for side in sides:  # the brokers and their topics go with the temporary homes
            side.use()
            settings[side.name] = fresh_topics(side.bootstrap, run)
            total = prefill(settings[side.name], args.nodes, args.seconds)
        print(f"drain: {total:,} events pre-filled on each ({args.nodes} nodes x {GPUS} GPUs, "
              f"{args.seconds} simulated s)", flush=True)
        drained = detector(sides, settings, run, total, args.rounds, Path(tmp))
        print("the executor's rank reports to telemetry.worker (the hook's path past its socket):")
        published = hook_leg(sides, settings, args)
    print(f"medians of {args.rounds} rounds; TLS/plain: the median of the rounds' own (each round's):")
    summary("detector: bare consumer drain (the ceiling)", drained, "ceiling", "events/s")
    summary("detector: consumer engine drain", drained, "engine", "events/s")
    summary("detector: engine / ceiling", drained, "share", "x")
    summary("detector: reader's CPU per event (ceiling)", drained, "reader", "µs", 1e6)
    summary("detector: broker's CPU per event (ceiling)", drained, "broker_ceiling", "µs", 1e6)
    summary("detector: worker's CPU per event (engine)", drained, "worker", "µs", 1e6)
    summary("detector: broker's CPU per event (engine)", drained, "broker_engine", "µs", 1e6)
    summary("executor: a new connection (SCRAM, metadata)", published, "connect_s", "ms", 1e3)
    summary("executor: paced report, produce-to-ack median", published, "median_ms", "ms")
    summary("executor: paced report, produce-to-ack p99", published, "p99_ms", "ms")
    summary("executor: burst", published, "burst", "reports/s")
    summary("executor: its CPU per report (burst)", published, "cpu", "µs", 1e6)
    summary("executor: broker's CPU per report (burst)", published, "broker", "µs", 1e6)
    load = os.getloadavg()
    print(f"load after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
