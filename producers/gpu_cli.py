"""Sample every GPU of this host once per interval and publish one gpu_sample per GPU: from NVML (the
default), a dcgm-exporter endpoint, or synthetic GPUs with scripted faults (--inject, --control;
docs/producers.md, "GPU producer" and "Fault-injection grammar").
"""

from __future__ import annotations

from trainmedic.bus.config import Section
from trainmedic.producers.command import ProducerCommand
from trainmedic.producers.config import GpuProducerConfig


def open_gpus(config: GpuProducerConfig, now: float):
    """The configured source; where no NVIDIA driver answers, an error naming the sources that need none."""
    from trainmedic.producers.gpu_producer import open_source
    from trainmedic.producers.nvml import NvmlUnavailable

    try:
        return open_source(config, now)
    except NvmlUnavailable as err:
        raise NvmlUnavailable(
            f"no NVIDIA driver answers here ({err}).\n"
            "Other sources: --source dcgm --dcgm-url http://HOST:9400/metrics (a dcgm-exporter), or "
            "--source synthetic --synthetic-nodes n01,n02 --gpus-per-node 8 (fake GPUs with --inject faults)."
        ) from None


def _parts():
    from trainmedic.producers.gpu_producer import run_gpu_producer

    return open_gpus, run_gpu_producer


GPU = ProducerCommand("gpu", Section(GpuProducerConfig, env="GPU"), _parts)
add_arguments, run = GPU.add_arguments, GPU.run
