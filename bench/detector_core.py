"""Throughput of the detection core on a synthetic 16,384-GPU / 2,048-node cluster.

Each simulated second: one gpu_sample per GPU, one heartbeat per node, one worker_step per
rank of four 4,096-rank jobs (one rank per GPU): ~34.8k events. Events are made in memory
one simulated second at a time (not timed); only the detector (and, for the validated paths,
JSON decoding: into the pydantic models, or by the hot path's msgspec Structs) is timed, with
garbage collection tuned as the detector tunes it (`trainmedic.streams.engines.consumer.tune_gc`).

    python bench/detector_core.py [--seconds 30]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import msgspec

from trainmedic.bus.message import RawMessage
from trainmedic.schemas.codec import decode_telemetry, encode
from trainmedic.schemas.telemetry import GpuSample, NodeHeartbeat, WorkerStepped
from trainmedic.schemas.wire import decode_telemetry as decode_fast
from trainmedic.streams.checkpoints.contents import decode_checkpoint, encode_checkpoint
from trainmedic.streams.core import Detector, DetectorState
from trainmedic.streams.engines.consumer import GC_THRESHOLDS, tune_gc
from trainmedic.streams.live import LiveDetector

NODES, GPUS_PER_NODE, JOBS = 2048, 8, 4
FETCH = 2_000  # messages a fetch returns (ServiceConfig.batch)
NODES_PER_JOB = NODES // JOBS


def second(t: int) -> list:
    """One simulated second of telemetry, in event-time order."""
    out = []
    for n in range(NODES):
        ts = 1_700_000_000.0 + t + n / NODES
        node = f"node-{n:04d}"
        out.append(NodeHeartbeat.model_construct(type="node_heartbeat", v=1, ts=ts, node=node,
                                                 interval=1.0, links=()))
        for g in range(GPUS_PER_NODE):
            out.append(GpuSample.model_construct(
                type="gpu_sample", v=1, ts=ts, node=node, gpu=g, uuid=None, util=97.0,
                mem_used_mb=70000.0, mem_total_mb=81559.0, temp_c=60.0 + g, power_w=600.0,
                ecc_sbe=0, ecc_dbe=0, nvlink_errors=0, xids=(), throttle=()))
        job, first = divmod(n, NODES_PER_JOB)
        for g in range(GPUS_PER_NODE):
            rank = first * GPUS_PER_NODE + g
            out.append(WorkerStepped.model_construct(
                type="worker_step", v=1, ts=ts, node=node, job=f"job-{job}", rank=rank,
                world_size=NODES_PER_JOB * GPUS_PER_NODE, generation=0, pid=None, step=t,
                step_time=0.98 + 0.01 * (rank % 5)))
    return out


def core_alone(seconds: int) -> tuple[int, float, Detector]:
    detector, events, busy = Detector(), 0, 0.0
    for t in range(seconds):
        batch = second(t)
        observe = detector.observe
        start = time.perf_counter()
        for event in batch:
            observe(event)
        busy += time.perf_counter() - start
        events += len(batch)
    return events, busy, detector


def live_path(seconds: int) -> tuple[int, float, LiveDetector]:
    """The core behind LiveDetector, as the detector feeds it: 30 partitions, each event with its
    origin and message value, read 2,000 at a time as a fetch returns them (a run per partition,
    arrival = ts) and fed a run at a time (all made before the clock starts)."""
    live, events, busy = LiveDetector(Detector()), 0, 0.0
    for t in range(seconds):
        batch = second(t)
        fetches = []
        for first in range(0, len(batch), FETCH):
            runs: dict[tuple, list] = {}
            for e in batch[first:first + FETCH]:
                source = (type(e).__name__, hash(getattr(e, "job", None) or e.node) % 10)
                origin = RawMessage(*source, 0, 0, e.node.encode(), encode(e))
                runs.setdefault(source, []).append((e.ts, e, origin))
            fetches.append((batch[min(first + FETCH, len(batch)) - 1].ts, list(runs.items())))
        feed = live.feed_many
        start = time.perf_counter()
        for wall, runs in fetches:
            feed(runs, wall)
        busy += time.perf_counter() - start
        events += len(batch)
    return events, busy, live


def validated(seconds: int, decoder: Callable[[bytes], object]) -> tuple[int, float]:
    detector, events, busy = Detector(), 0, 0.0
    for t in range(seconds):
        raw = [json.dumps(e.model_dump(mode="json")).encode() for e in second(t)]
        observe = detector.observe
        start = time.perf_counter()
        for line in raw:
            observe(decoder(line))
        busy += time.perf_counter() - start
        events += len(raw)
    return events, busy


def json_state(state: DetectorState) -> bytes:
    """The state as the standard library encoded it before issue 18, for comparison."""
    return json.dumps(state, default=lambda part: {name: getattr(part, name) for name in part.__slots__},
                      separators=(",", ":")).encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=30, help="simulated seconds")
    args = parser.parse_args()
    tune_gc()  # as the detector does: Python's defaults collect every few hundred events
    print(f"garbage collection as the detector runs it: thresholds {GC_THRESHOLDS}")
    events, busy, detector = core_alone(args.seconds)
    state = detector.state
    print(f"cluster: {NODES} nodes, {NODES * GPUS_PER_NODE} GPUs, {JOBS} jobs of "
          f"{NODES_PER_JOB * GPUS_PER_NODE} ranks; {args.seconds} simulated s")
    print(f"core alone:           {events:>9,} events in {busy:6.2f} s = "
          f"{events / busy:>9,.0f} events/s  ({busy / events * 1e6:.2f} us/event)")
    print(f"  state: {len(state.nodes)} nodes, {len(state.jobs)} jobs, "
          f"{len(state.incidents)} open incidents")
    for label, encode_state in (("JSON by json (before issue 18)", json_state),
                                ("JSON by msgspec (format 4)", msgspec.json.encode),
                                ("msgpack by msgspec (format 5)", DetectorState.to_msgpack)):
        start = time.perf_counter()
        size = len(encode_state(state))
        print(f"  state as {label:30}: {size / 1e6:.1f} MB in {time.perf_counter() - start:.3f} s")
    events, busy, live = live_path(min(args.seconds, 10))
    print(f"LiveDetector + core:  {events:>9,} events in {busy:6.2f} s = "
          f"{events / busy:>9,.0f} events/s  ({busy / events * 1e6:.2f} us/event)")
    start = time.perf_counter()
    checkpoint = encode_checkpoint(live, {}, wall=time.time())
    made = time.perf_counter() - start
    start = time.perf_counter()
    decode_checkpoint(checkpoint)
    read = time.perf_counter() - start
    print(f"  checkpoint, {live.buffered:,} events held: "
          f"{len(checkpoint) / 1e6:.1f} MB, {made:.2f} s to make, {read:.2f} s to read back")
    for label, decoder in (("pydantic", decode_telemetry), ("msgspec", decode_fast)):
        events, busy = validated(min(args.seconds, 10), decoder)
        print(f"JSON decode ({label:8}) + core: {events:>9,} events in {busy:6.2f} s = "
              f"{events / busy:>9,.0f} events/s  ({busy / events * 1e6:.2f} us/event)")


if __name__ == "__main__":
    main()
