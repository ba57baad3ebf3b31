"""One validated, frozen config per producer service: the GPU producer and the host agent."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bus.errors import ConfigError
from producers.faults import GpuFault, LinkFlap

GpuSourceName = Literal["nvml", "dcgm", "synthetic"]


@dataclass(frozen=True)
class Delivery:
    """How samples reach Kafka: the bound on the local queue and the flush deadline at shutdown."""

    max_buffered: int = 10_000
    flush_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if self.max_buffered < 1:
            raise ConfigError("the local Kafka queue must hold at least 1 message")
        if not (math.isfinite(self.flush_timeout_s) and self.flush_timeout_s >= 0):
            raise ConfigError("the flush deadline must be a finite number of seconds >= 0")


@dataclass(frozen=True)
class GpuProducerConfig:
    """What `trainmedic gpu` samples, how often, and (synthetic only) which faults it injects."""

    node: str
    source: GpuSourceName = "nvml"
    interval_s: float = 1.0
    dcgm_url: str | None = None
    synthetic_nodes: tuple[str, ...] = ()  # empty: just `node`
    gpus_per_node: int = 8
    seed: int = 0
    faults: tuple[GpuFault, ...] = ()
    control: Path | None = None
    delivery: Delivery = Delivery()

    def __post_init__(self) -> None:
        _check_interval(self.interval_s)
        if not self.node:
            raise ConfigError("the node name must not be empty")
        if self.source == "dcgm" and not self.dcgm_url:
            raise ConfigError("--source dcgm needs --dcgm-url, e.g. http://localhost:9400/metrics")
        if self.source != "dcgm" and self.dcgm_url:
            raise ConfigError("--dcgm-url is for --source dcgm")
        if self.source != "synthetic" and (self.faults or self.control or self.synthetic_nodes):
            raise ConfigError("fault injection (--inject, --control) and --nodes need --source synthetic")
        if self.gpus_per_node < 1:
            raise ConfigError("--gpus must be at least 1")

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.synthetic_nodes or (self.node,)


@dataclass(frozen=True)
class HostAgentConfig:
    """What `trainmedic agent` reports: which links, read from which sysfs, how often."""

    node: str
    interval_s: float = 1.0
    links: tuple[str, ...] = ()  # empty: every non-loopback, non-virtual NIC and every IB port
    sysfs: Path = Path("/sys")
    flaps: tuple[LinkFlap, ...] = ()
    control: Path | None = None
    delivery: Delivery = Delivery()

    def __post_init__(self) -> None:
        _check_interval(self.interval_s)
        if not self.node:
            raise ConfigError("the node name must not be empty")
        if len(set(self.links)) != len(self.links):
            raise ConfigError("--links names a link twice")


def _check_interval(interval_s: float) -> None:
    if not (math.isfinite(interval_s) and interval_s > 0):
        raise ConfigError(f"the interval must be a positive number of seconds, not {interval_s}")
