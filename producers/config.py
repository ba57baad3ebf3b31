"""One validated, frozen config per producer service, the GPU producer (TRAINMEDIC_GPU_*) and the host
agent (TRAINMEDIC_AGENT_*): flags, variables and YAML keys (docs/producers.md, "Configuration").
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    InstanceOf,
    field_validator,
    model_validator,
)

from trainmedic.common.errors import ConfigError
from trainmedic.common.timespan import parse_duration
from trainmedic.producers.faults import GpuFault, LinkFlap, parse_fault

GpuSourceName = Literal["nvml", "dcgm", "synthetic"]
_FROZEN = ConfigDict(frozen=True, extra="forbid")


def _seconds(value: Any) -> Any:
    return parse_duration(value) if isinstance(value, str) else value


# A number of seconds; text may carry a unit: 250ms, 1s, 2m.
Seconds = Annotated[float, BeforeValidator(_seconds)]


def _faults(specs: Any, kind: type, elsewhere: str) -> Any:
    """Fault specs (text, as flags give them) as faults of `kind`; a fault of another kind is refused."""
    if isinstance(specs, str) or not isinstance(specs, list | tuple):
        return specs
    faults = []
    for spec in specs:
        try:
            fault = parse_fault(spec) if isinstance(spec, str) else spec
        except ConfigError as err:
            raise ValueError(str(err)) from None
        if not isinstance(fault, kind):
            raise ValueError(elsewhere)
        faults.append(fault)
    return tuple(faults)


class Delivery(BaseModel):
    """How samples reach Kafka: the bound on the local queue and the flush deadline at shutdown."""

    model_config = _FROZEN

    max_buffered: int = Field(10_000, ge=1, description="messages held locally while Kafka is away; "
                              "past that, new ones are dropped and counted")
    flush_timeout_s: Seconds = Field(5.0, ge=0, allow_inf_nan=False, description="on SIGTERM/SIGINT, "
                                     "how long to try to deliver what is queued")


class GpuProducerConfig(BaseModel):
    """What `trainmedic gpu` samples, how often, and (synthetic only) which faults it injects."""

    model_config = _FROZEN

    node: str = Field(min_length=1, description="the node name on the samples (default: this host's name)")
    source: GpuSourceName = Field("nvml", description="where GPU samples come from")
    interval_s: Seconds = Field(1.0, gt=0, allow_inf_nan=False,
                                description="time between samples of a GPU, e.g. 1 or 250ms")
    dcgm_url: str | None = Field(None, description="dcgm-exporter metrics URL, for --source dcgm, "
                                 "e.g. http://localhost:9400/metrics")
    synthetic_nodes: tuple[str, ...] = Field((), description="synthetic node names (default: --node)")
    gpus_per_node: int = Field(8, ge=1, description="synthetic GPUs per node")
    seed: int = Field(0, description="seed of the synthetic sampled values")
    inject: tuple[InstanceOf[GpuFault], ...] = Field((), description="a synthetic GPU fault to inject "
                                                     "(repeatable), see the grammar above")
    control: Path | None = Field(None, description="a file the producer watches: each line appended is "
                                 "a fault spec to inject")
    delivery: Delivery = Delivery()

    @field_validator("inject", mode="before")
    @classmethod
    def _gpu_faults(cls, specs: Any) -> Any:
        return _faults(specs, GpuFault, "link flaps are injected by `trainmedic agent`, not the GPU producer")

    @model_validator(mode="after")
    def _fits_the_source(self) -> GpuProducerConfig:
        if self.source == "dcgm" and not self.dcgm_url:
            raise ValueError("--source dcgm needs --dcgm-url, e.g. http://localhost:9400/metrics")
        if self.source != "dcgm" and self.dcgm_url:
            raise ValueError("--dcgm-url is for --source dcgm")
        if self.source != "synthetic" and (self.inject or self.control or self.synthetic_nodes):
            raise ValueError("fault injection (--inject, --control) and --synthetic-nodes "
                             "need --source synthetic")
        return self

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.synthetic_nodes or (self.node,)


class HostAgentConfig(BaseModel):
    """What `trainmedic agent` reports: which links, read from which sysfs, how often."""

    model_config = _FROZEN

    node: str = Field(min_length=1, description="this node's name (default: this host's name)")
    interval_s: Seconds = Field(1.0, gt=0, allow_inf_nan=False,
                                description="time between heartbeats, promised in each, e.g. 1 or 250ms")
    links: tuple[str, ...] = Field((), description="the links to report, e.g. eth0,ib0,mlx5_0:1 (default: "
                                   "every non-loopback, non-virtual NIC and every InfiniBand port)")
    sysfs: Path = Field(Path("/sys"), description="sysfs root")
    inject: tuple[InstanceOf[LinkFlap], ...] = Field((), description="a link flap to inject (repeatable): "
                                                     "flap=LINK,at=DURATION,for=DURATION")
    control: Path | None = Field(None, description="a file the agent watches: each line appended is a "
                                 "flap spec to inject")
    delivery: Delivery = Delivery()

    @field_validator("inject", mode="before")
    @classmethod
    def _link_flaps(cls, specs: Any) -> Any:
        return _faults(specs, LinkFlap, "GPU faults are injected by `trainmedic gpu --source synthetic`, "
                       "not the agent")

    @field_validator("links")
    @classmethod
    def _distinct(cls, links: tuple[str, ...]) -> tuple[str, ...]:
        if not all(links):
            raise ValueError("a link name is empty")
        if len(set(links)) != len(links):
            raise ValueError("names a link twice")
        return links
