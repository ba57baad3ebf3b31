"""Synthetic GPUs through the real broker into the validating consumer."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.integration.producers.consume import consume_until
from trainmedic.bus.outbox import Outbox
from trainmedic.bus.settings import KafkaSettings
from trainmedic.producers.config import GpuProducerConfig
from trainmedic.producers.faults import XidFault
from trainmedic.producers.gpu_producer import GpuProducer, open_source, run_gpu_producer
from trainmedic.producers.rounds import open_outbox
from trainmedic.schemas import GpuSample

pytestmark = pytest.mark.kafka
T0 = 1_700_000_000.0


def test_every_sample_arrives_valid_keyed_by_node_with_its_xid_once(
    kafka: KafkaSettings, group_id: str,
) -> None:
    config = GpuProducerConfig(
        node="n01", source="synthetic", synthetic_nodes=("n01", "n02"), gpus_per_node=2,
        inject=(XidFault(code=79, node="n02", gpu=1, at_s=1.0),),
    )
    source = open_source(config, T0)
    outbox = open_outbox(kafka, config.delivery, client_id="test", what="gpu samples")
    producer = GpuProducer(source, outbox, kafka.topics.gpu)
    for t in range(3):
        producer.round(T0 + t)
    outbox.flush(10.0)
    assert (outbox.sent, outbox.dropped) == (12, 0)

    records = consume_until(kafka, kafka.topics.gpu, group_id, lambda rs: len(rs) >= 12)
    assert len(records) == 12
    assert all(isinstance(r.event, GpuSample) and r.key == r.event.node for r in records)
    assert sorted((r.event.ts, r.event.node, r.event.gpu) for r in records) == [
        (T0 + t, n, g) for t in range(3) for n in ("n01", "n02") for g in range(2)
    ]
    with_xids = [(r.event.ts, r.event.node, r.event.gpu, r.event.xids) for r in records if r.event.xids]
    assert with_xids == [(T0 + 1, "n02", 1, (79,))]


def test_a_running_producer_takes_faults_from_its_control_file(
    kafka: KafkaSettings, group_id: str, tmp_path: Path,
) -> None:
    control = tmp_path / "faults"
    config = GpuProducerConfig(
        node="n01", source="synthetic", synthetic_nodes=("n01", "n02"), gpus_per_node=4, interval_s=0.05,
        control=control,
    )
    stop = threading.Event()
    result: list[Outbox] = []
    source = open_source(config, 0.0)
    thread = threading.Thread(target=lambda: result.append(run_gpu_producer(config, kafka, source, stop)))
    thread.start()
    try:
        # The producer reads the control file's end before its first sample: once a sample
        # arrived, what is written next is new to it.
        records = consume_until(kafka, kafka.topics.gpu, group_id, bool)
        control.write_text("xid=banana\nxid=79,node=n02,gpu=3\n")

        def xid_seen(records: list) -> bool:
            return any(r.event.xids for r in records)

        records += consume_until(kafka, kafka.topics.gpu, group_id, xid_seen)
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()
    assert [(r.event.node, r.event.gpu, r.event.xids) for r in records if r.event.xids] == [("n02", 3, (79,))]
    assert result[0].dropped == 0 and result[0].sent >= len(records)
