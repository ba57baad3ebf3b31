"""How many gpu_samples per second one core of the synthetic GPU producer makes, with and
without Kafka: samples built and serialized only, then the same rounds sent to the broker
at TRAINMEDIC_KAFKA_BOOTSTRAP (default 127.0.0.1:9092) under the topic prefix `bench.`.

Per core = events / CPU seconds of the whole process (librdkafka's threads included).

    .venv/bin/python bench/producer_rate.py [--nodes 64] [--gpus 8] [--rounds 40]
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable

from trainmedic.producers.config import Delivery
from trainmedic.producers.synthetic import SyntheticGpus
from trainmedic.schemas import GpuSample, encode


def measure(rounds: int, source: SyntheticGpus, emit: Callable[[GpuSample], None],
            finish: Callable[[], None]) -> tuple[int, float, float]:
    """(events, wall seconds, CPU seconds) for `rounds` rounds of every GPU."""
    events = 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for r in range(rounds):
        for sample in source.sample(1_700_000_000.0 + r):
            emit(sample)
            events += 1
    finish()
    return events, time.perf_counter() - wall0, time.process_time() - cpu0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from trainmedic.bus.admin import create_topics
    from trainmedic.bus.settings import KafkaSettings
    from trainmedic.producers.rounds import open_outbox

    nodes = [f"n{i:03d}" for i in range(args.nodes)]
    settings = KafkaSettings.from_env(role="admin", topic_prefix="bench.")
    create_topics(settings, partitions=12, timeout_s=10)
    print(f"{args.nodes} nodes x {args.gpus} GPUs, {args.rounds} rounds; broker {settings.bootstrap}")

    sizes: list[int] = []
    source = SyntheticGpus(nodes, args.gpus, start=1_700_000_000.0, seed=1)
    result = measure(args.rounds, source, lambda s: sizes.append(len(encode(s))), lambda: None)
    report("serialize only", *result)
    print(f"{'':16} mean event size {sum(sizes) / len(sizes):.0f} bytes")

    outbox = open_outbox(settings, Delivery(max_buffered=1_000_000, flush_timeout_s=60),
                         client_id="bench", what="gpu samples")
    source = SyntheticGpus(nodes, args.gpus, start=1_700_000_000.0, seed=1)
    result = measure(args.rounds, source, lambda s: outbox.send(settings.topics.gpu, s, s.node),
                     lambda: outbox.flush(60))
    report("into Kafka", *result)
    print(f"{'':16} delivered {outbox.sent - outbox.dropped}, dropped {outbox.dropped}")


def report(what: str, events: int, wall_s: float, cpu_s: float) -> None:
    print(f"{what:16} {events} events in {wall_s:.2f} s: {events / wall_s:,.0f} events/s wall, "
          f"{events / cpu_s:,.0f} events per CPU second")


if __name__ == "__main__":
    main()
