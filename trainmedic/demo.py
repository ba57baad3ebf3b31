"""The local demo: a real broker, a burst of telemetry from a small synthetic cluster, read back.

Until the executor lands, this is the whole demo: it starts the local broker (unless
TRAINMEDIC_KAFKA_BOOTSTRAP names one), creates the topics, publishes heartbeats, GPU samples
and training steps for a 4-node cluster plus one malformed message, then consumes them
through the validating consumer and shows what arrived and what went to the dlq.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections import Counter

from trainmedic.errors import TrainmedicError

NODES = [f"node-{i}" for i in range(4)]
GPUS_PER_NODE = 8
RANKS_PER_NODE = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=int, default=5, help="seconds of telemetry to publish")


def run(args: argparse.Namespace) -> int:
    from trainmedic.broker import LocalBroker
    from trainmedic.settings import KafkaSettings, home

    broker = None
    prefix = f"demo-{uuid.uuid4().hex[:6]}."
    try:
        if not os.environ.get("TRAINMEDIC_KAFKA_BOOTSTRAP"):
            broker = LocalBroker(home())
            began = time.monotonic()
            state, started = broker.start()
            print(f"[demo] broker {'started' if started else 'already running'} at {state.bootstrap} "
                  f"({time.monotonic() - began:.1f}s)")
            if not started:
                broker = None  # not ours to stop
            settings = KafkaSettings.from_env(bootstrap=state.bootstrap, topic_prefix=prefix)
        else:
            settings = KafkaSettings.from_env(topic_prefix=prefix)
        return _publish_and_read(settings, args.seconds)
    except TrainmedicError as err:
        print(f"[demo] failed: {err}", file=sys.stderr)
        return 1
    finally:
        if broker is not None:
            broker.stop()
            print("[demo] broker stopped")


def _publish_and_read(settings, seconds: int) -> int:
    import schemas as s
    from trainmedic.kafka import EventConsumer, EventProducer, create_topics

    topics = settings.topics
    create_topics(settings, partitions=2)
    print(f"[demo] topics created under prefix {settings.topic_prefix!r}")
    start = time.time() - seconds
    sent: Counter[str] = Counter()
    with EventProducer(settings, client_id="demo") as producer:
        for second in range(seconds):
            ts = start + second
            for n, node in enumerate(NODES):
                producer.send(topics.node, s.NodeHeartbeat(ts=ts, node=node, interval=1.0), key=node)
                sent["node_heartbeat"] += 1
                for gpu in range(GPUS_PER_NODE):
                    sample = s.GpuSample(ts=ts, node=node, gpu=gpu, util=95.0, temp_c=60 + gpu,
                                         ecc_dbe=0, nvlink_errors=0)
                    producer.send(topics.gpu, sample, key=node)
                    sent["gpu_sample"] += 1
                for local in range(RANKS_PER_NODE):
                    step = s.WorkerStepped(ts=ts, node=node, job="demo", rank=n * RANKS_PER_NODE + local,
                                           world_size=len(NODES) * RANKS_PER_NODE, step=second,
                                           step_time=0.05)
                    producer.send(topics.worker, step, key="demo")
                    sent["worker_step"] += 1
        producer.send(topics.gpu, b'{"type": "gpu_sample", "node": "node-0"}', key="node-0")
        sent["malformed"] += 1
    print(f"[demo] published {sum(sent.values())} messages: {dict(sent)}")

    received: Counter[str] = Counter()
    want = sum(sent.values()) - sent["malformed"]
    deadline = time.monotonic() + 60
    with EventConsumer(settings, [topics.gpu, topics.node, topics.worker], f"demo-{uuid.uuid4().hex}",
                       dlq=EventProducer(settings, client_id="demo-dlq")) as consumer:
        while sum(received.values()) < want and time.monotonic() < deadline:
            for record in consumer.poll(0.5):
                received[record.event.type] += 1
        consumer.poll(0.5)
        dead = consumer.dead_lettered
    print(f"[demo] consumed and validated {sum(received.values())}: {dict(received)}; dead-lettered: {dead}")
    ok = sum(received.values()) == want and dead == 1
    print("[demo] " + ("every event arrived, the malformed one went to the dlq with its reason" if ok
                       else "MISMATCH between what was published and what was consumed"))
    print("[demo] coming next: the detector, the coordinator and executors that heal a real "
          "torch.distributed job (see README.md)")
    return 0 if ok else 1
