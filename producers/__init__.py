"""Telemetry producers: GPUs (NVML, dcgm-exporter, synthetic with faults), host health, and the
in-band training hook. See docs/producers.md."""
