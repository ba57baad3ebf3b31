"""What checking each telemetry record's MAC (bus/telemetry_keys.py) costs the detector, side by side.

A synthetic cluster sized for --rate events/s (default 150,000: ~8,800 nodes x 8 GPUs, one heartbeat
per node, one gpu_sample per GPU and one worker_step per rank each second, bench/harness), every record
tagged by its node's key as a node's producer tags it. Two measures, each without and with the check,
taken in turns (--rounds):

(a) in process, the detector's hot path as the consumer engine runs it (`Pipeline.on_fetch` over
    confluent-kafka messages in fetches of 2,000): the whole detector (decoding, the clock bounds,
    the live detector and its rules), and the ingest stage of a sharded detector alone (decoding and
    the bounds: where the check runs when the detector is sharded, and where it weighs most);
(b) live, on a secure broker of the bench's own: --seconds of that cluster pre-filled, then drained from
    the same topics by the consumer engine and by a sharded detector of one ingest instance (which
    checks) and its decider (the `consumer`, `consumer-macs`, `sharded-1` and `sharded-1-macs` workers
    of bench/detector_live.py), in turns.

    python bench/telemetry_macs.py [--rate 150000] [--seconds 3] [--rounds 3] [--skip-live]
"""

from __future__ import annotations

import argparse
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


def hot_path(batches: list[list[Message]], whole: bool, verifier: Verifier | None, end: float) -> float:
    """Events per second through `Pipeline.on_fetch` and the ticks that release what it holds: the
    whole detector, or the ingest stage alone."""
    pipeline = Pipeline(Topics("bench."), LiveDetector(Detector()) if whole else None, max_skew_s=300.0,
                        verifier=verifier)
    offsets: dict = {}
    began = time.perf_counter()
    if whole:
        for batch in batches:
            pipeline.on_fetch(batch, end, offsets, print)
        pipeline.on_tick(end + 60.0)
    else:
        check_one = pipeline.check
        for batch in batches:  # the ingest stage checks each message (streams/engines/ingest_stage.py)
            for msg in batch:
                check_one(RawMessage.of(msg), end, msg.headers())
    took = time.perf_counter() - began
    count = sum(len(b) for b in batches)
    assert pipeline.stats.events == count and pipeline.stats.dead_lettered == 0, pipeline.stats
    return count / took


def in_process(nodes: int, seconds: int, rounds: int) -> None:
    base = time.time() - seconds
    batches = fetches(nodes, seconds, base)
    count = sum(len(b) for b in batches)
    print(f"(a) in process: {count:,} events ({nodes:,} nodes x {seconds} s), fetches of {FETCH:,}, "
          f"{rounds} rounds in turns, median")
    verifier = Verifier(MASTER.key, "bench.")  # its keys derived once, as a running detector has them
    hot_path(batches, False, verifier, base + seconds)
    for whole, name in ((True, "whole detector"), (False, "ingest stage")):
        rates: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(rounds):
            for check in (False, True):
                rates[check].append(hot_path(batches, whole, verifier if check else None, base + seconds))
        off, on = statistics.median(rates[False]), statistics.median(rates[True])
        print(f"    {name:15s} without the check {off:10,.0f} events/s   with it {on:10,.0f} events/s   "
              f"cost {100 * (1 - on / off):4.1f} %  ({1e6 / on - 1e6 / off:.2f} us an event)")


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
    parser.add_argument("--rounds", type=int, default=3, help="measures of each side, in turns")
    parser.add_argument("--skip-live", action="store_true", help="only (a), no broker")
    args = parser.parse_args()
    nodes = max(JOBS, round(args.rate / EVENTS_PER_NODE / JOBS) * JOBS)
    tune_gc()
    in_process(nodes, args.seconds, args.rounds)
    if not args.skip_live:
        live(nodes, args.seconds, args.rounds)


if __name__ == "__main__":
    main()
