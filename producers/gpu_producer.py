"""The GPU producer: every interval, one gpu_sample per GPU from NVML, dcgm-exporter or synthetic GPUs; in
between, at once, a sample of each GPU that reports an Xid (docs/producers.md, "Xids at once")."""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from trainmedic.bus.outbox import Outbox
from trainmedic.bus.settings import KafkaSettings
from trainmedic.common.errors import ConfigError
from trainmedic.producers.config import GpuProducerConfig
from trainmedic.producers.control import ControlFile
from trainmedic.producers.dcgm_scraper import DcgmScraper
from trainmedic.producers.faults import GpuFault, HardwareFault
from trainmedic.producers.nvml import NvmlGpus
from trainmedic.producers.rounds import apply_control, open_outbox, serve
from trainmedic.producers.synthetic import SyntheticGpus
from trainmedic.schemas import GpuSample

log = logging.getLogger(__name__)


class GpuSource(Protocol):
    """Where samples come from: `sample(now)` returns one per GPU that answers; `urgent(now)` one per GPU
    with an Xid reported since its last sample (none from a source that learns of Xids only by sampling)."""

    def sample(self, now: float) -> list[GpuSample]: ...

    def urgent(self, now: float) -> list[GpuSample]: ...

    def close(self) -> None: ...


def open_source(config: GpuProducerConfig, now: float, nvml: Any = None) -> GpuSource:
    """The configured source, ready to sample; NVML raises NvmlUnavailable when no driver answers."""
    if config.source == "synthetic":
        return SyntheticGpus(config.nodes, config.gpus_per_node, start=now, seed=config.seed,
                             faults=config.inject)
    if config.source == "dcgm":
        return DcgmScraper(str(config.dcgm_url), config.node)  # the config requires a URL for dcgm
    source = NvmlGpus(config.node, nvml)
    source.open()
    return source


class GpuProducer:
    """One round: apply runtime faults (synthetic only), sample every GPU, queue each sample. Between
    rounds: the same faults, and the samples of GPUs with new Xids, at once."""

    def __init__(
        self, source: GpuSource, outbox: Outbox, topic: str, control: ControlFile | None = None,
    ) -> None:
        self.source = source
        self.outbox = outbox
        self.topic = topic
        self.control = control

    def round(self, now: float) -> None:
        apply_control(self.control, self._inject, now)
        self._send(self.source.sample(now))

    def between(self, now: float) -> None:
        apply_control(self.control, self._inject, now)
        urgent = self.source.urgent(now)
        if urgent:
            self._send(urgent)

    def _send(self, samples: list[GpuSample]) -> None:
        for sample in samples:
            self.outbox.send(self.topic, sample, key=sample.node)
        self.outbox.poll()

    def _inject(self, fault: HardwareFault, now: float) -> None:
        if not isinstance(self.source, SyntheticGpus) or not isinstance(fault, GpuFault):
            raise ConfigError("only GPU faults (xid, ecc, nvlink, thermal, lost) on synthetic GPUs")
        self.source.inject(fault, now)


def run_gpu_producer(
    config: GpuProducerConfig, settings: KafkaSettings, source: GpuSource, stop: threading.Event,
) -> Outbox:
    """Sample `source` into Kafka until `stop` is set, then flush. Returns the outbox (its counts)."""
    outbox = open_outbox(settings, config.delivery, client_id=settings.topics.owned(f"gpu-{config.node}"),
                         what="gpu samples")
    control = ControlFile.at_end(config.control) if config.control else None
    producer = GpuProducer(source, outbox, settings.topics.gpu, control)
    log.info("sampling %s GPUs every %.3gs into %s", config.source, config.interval_s, settings.topics.gpu)
    try:
        serve(producer.round, config.interval_s, outbox, config.delivery, stop, between=producer.between)
    finally:
        source.close()
    return outbox
