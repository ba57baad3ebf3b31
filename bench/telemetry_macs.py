"""What checking each telemetry record's MAC (bus/telemetry_keys.py) costs the detector, side by side.

A synthetic cluster sized for --rate events/s (default 150,000: ~8,800 nodes x 8 GPUs, one heartbeat
per node, one gpu_sample per GPU and one worker_step per rank each second, bench/harness), every record
tagged by its node's key as a node's producer tags it. Two measures, each without and with the check
(--rounds of each):

(a) in process, the detector's hot path as the consumer engine runs it (`Pipeline.on_fetch` over
    confluent-kafka messages in fetches of 2,000): the whole detector (decoding, the clock bounds,
    the live detector and its rules), and the ingest stage of a sharded detector alone (decoding and
    the bounds: where the check runs when the detector is sharded, and where it weighs most); two
    detectors, one without the check and one with it, fed the same fetches in turns, fetch by fetch;
(b) live, on a secure broker of the bench's own: --seconds of that cluster pre-filled, then drained from
    the same topics by the consumer engine and by a sharded detector of one ingest instance (which
    checks) and its decider (the `consumer`, `consumer-macs`, `sharded-1` and `sharded-1-macs` workers
    of bench/detector_live.py), in turns.

    python bench/telemetry_macs.py [--rate 150000] [--seconds 3] [--rounds 3] [--skip-live]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Message
from detector_live import own_broker, worker_drain
from harness.synthetic_telemetry import (
    EVENTS_PER_NODE,
    JOBS,
    cluster_second,
    delete_run,
    fresh_topics,
    prefill,
)

from trainmedic.bus.message import RawMessage
from trainmedic.bus.telemetry_keys import Signer, TelemetryKey, Verifier
from trainmedic.schemas import Topics
from trainmedic.streams.core import Detector
from trainmedic.streams.engines.consumer import tune_gc
from trainmedic.streams.live import LiveDetector
from trainmedic.streams.pipeline import Pipeline

FETCH = 2_000
# Each detector measured live, without and with the check: the consumer engine, and a sharded detector
# of one ingest instance (where it checks) and its decider.
PAIRS = {"consumer engine": ("consumer", "consumer-macs"), "sharded (1 + 1)": ("sharded-1", "sharded-1-macs")}
MODES = [mode for pair in PAIRS.values() for mode in pair]
MASTER = TelemetryKey(bytes(range(32)), None)


def fetches(nodes: int, seconds: int, base: float) -> list[list[Message]]:
    """The cluster's telemetry as the consumer reads it: tagged messages, in fetches of FETCH."""
    topics, signer = Topics("bench."), Signer(MASTER, "bench.")
    messages = []
    for t in range(seconds):
        for offset, (topic, key, value, node) in enumerate(cluster_second(topics, nodes, t, base)):
            messages.append(Message(topic=topic, partition=offset % 4, offset=offset, key=key.encode(),
                                    value=value, headers=signer.headers(value, node),
                                    timestamp=(TIMESTAMP_LOG_APPEND_TIME, int((base + t) * 1000))))
    return [messages[i:i + FETCH] for i in range(0, len(messages), FETCH)]


def lockstep(batches: list[list[Message]], whole: bool, verifier: Verifier,
             end: float) -> tuple[float, float]:
    """Seconds two detectors spend on the same fetches, one without the check and one with it, fed in
    turns fetch by fetch (which goes first alternates): this machine's speed drifts by tens of percent
    over seconds, and so weighs on both alike. The whole detector (`Pipeline.on_fetch`, and the tick
    that releases what it holds), or the ingest stage alone."""
    pipelines = [Pipeline(Topics("bench."), LiveDetector(Detector()) if whole else None, max_skew_s=300.0,
                          verifier=check) for check in (None, verifier)]
    took, offsets, clock = [0.0, 0.0], [{}, {}], time.perf_counter
    for n, batch in enumerate(batches):
        for side in (0, 1) if n % 2 == 0 else (1, 0):
            began = clock()
            if whole:
                pipelines[side].on_fetch(batch, end, offsets[side], print)
            else:
                check_one = pipelines[side].check
                for msg in batch:  # the ingest stage checks each message (streams/engines/ingest_stage.py)
                    check_one(RawMessage.of(msg), end, msg.headers())
            took[side] += clock() - began
    if whole:
        for side in (0, 1):
            began = clock()
            pipelines[side].on_tick(end + 60.0)
            took[side] += clock() - began
        count = sum(len(b) for b in batches)
        for pipeline in pipelines:
            assert pipeline.stats.events == count and pipeline.stats.dead_lettered == 0, pipeline.stats
    return took[0], took[1]


def rounds_of(costs: list[float]) -> str:
    return ' '.join(f'{c:.1f}' for c in costs)


def in_process(nodes: int, seconds: int, rounds: int) -> None:
    base = time.time() - seconds
    batches = fetches(nodes, seconds, base)
    count = sum(len(b) for b in batches)
    print(f"(a) in process: {count:,} events ({nodes:,} nodes x {seconds} s) in fetches of {FETCH:,}, fed to "
          f"a detector without the check and one with it in turns, fetch by fetch; {rounds} rounds, median")
    verifier = Verifier(MASTER.key, "bench.")  # its keys derived once, as a running detector has them
    lockstep(batches, False, verifier, base + seconds)
    for whole, name in ((True, "whole detector"), (False, "ingest stage")):
        costs, extra, without, with_check = [], [], [], []
        for _ in range(rounds):
            gc.collect()  # what a round left is not collected during the next one's measure
            off, on = lockstep(batches, whole, verifier, base + seconds)
            costs.append(100 * (1 - off / on))  # the throughput lost: 1 - with/without, in events/s
            extra.append(1e6 * (on - off) / count)
            without.append(count / off)
            with_check.append(count / on)
        print(f"    {name:15s} without the check {statistics.median(without):10,.0f} events/s   with it "
              f"{statistics.median(with_check):10,.0f} events/s   cost {statistics.median(costs):4.1f} %  "
              f"({statistics.median(extra):.2f} us an event; rounds: {rounds_of(costs)} %)",
              flush=True)


def live(nodes: int, seconds: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-macs-") as tmp:
        home = Path(tmp)
        with own_broker(home) as (bootstrap, _pid):
            run = f"bench-{uuid.uuid4().hex[:8]}"
            settings = fresh_topics(bootstrap, run)
            try:
                total = prefill(settings, nodes, seconds)
                print(f"(b) live: {total:,} tagged events pre-filled ({nodes:,} nodes x {seconds} s), "
                      f"drained by the consumer engine, {rounds} rounds in turns, median")
                rates: dict[str, list[float]] = {mode: [] for mode in MODES}
                for n in range(rounds):
                    for mode in rates:
                        # an app id of its own each round: a worker of an earlier one committed the end
                        drained = worker_drain(settings, f"{run}-r{n}", home, total, mode)
                        assert drained["incidents"] == 0, drained  # healthy: no record refused as unverified
                        rates[mode].append(drained["events"] / drained["took_s"])
                        print(f"    round {n + 1} {mode:14s} {rates[mode][-1]:10,.0f} events/s", flush=True)
                for name, (without, with_check) in PAIRS.items():
                    off, on = statistics.median(rates[without]), statistics.median(rates[with_check])
                    print(f"    {name:16s} without the check {off:10,.0f} events/s   with it {on:10,.0f} "
                          f"events/s   cost {100 * (1 - on / off):4.1f} %")
            finally:
                delete_run(settings, run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=150_000, help="the cluster's events per second")
    parser.add_argument("--seconds", type=int, default=3, help="simulated seconds measured")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each measure (the costs are "
                        "their medians)")
    parser.add_argument("--skip-live", action="store_true", help="only (a), no broker")
    args = parser.parse_args()
    nodes = max(JOBS, round(args.rate / EVENTS_PER_NODE / JOBS) * JOBS)
    tune_gc()
    in_process(nodes, args.seconds, args.rounds)
    if not args.skip_live:
        live(nodes, args.seconds, args.rounds)


if __name__ == "__main__":
    main()
