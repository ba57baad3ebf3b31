"""dcgm-exporter's Prometheus text as gpu_samples (pure: text and time in, samples out)
(docs/producers.md, "dcgm-exporter (`--source dcgm --dcgm-url URL`)").
"""

from __future__ import annotations

from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families

from trainmedic.producers.throttle import throttle_reasons
from trainmedic.schemas import GpuSample

# DCGM field -> gpu_sample field, for the fields that map one to one.
DIRECT = {
    "DCGM_FI_DEV_GPU_UTIL": "util",
    "DCGM_FI_DEV_FB_USED": "mem_used_mb",
    "DCGM_FI_DEV_GPU_TEMP": "temp_c",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "ecc_sbe",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc_dbe",
}
FB_TOTAL = "DCGM_FI_DEV_FB_TOTAL"
FB_PARTS = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED")
NVLINK_ERRORS = (
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
)
THROTTLE = ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
XID = "DCGM_FI_DEV_XID_ERRORS"
COUNTERS = {"ecc_sbe", "ecc_dbe"}


class DcgmPayloadError(ValueError):
    """A scrape that is not Prometheus text."""


class DcgmMapper:
    """Maps successive scrapes to samples; remembers each GPU's last Xid gauge to see new ones."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._last_xid: dict[int, int] = {}

    def samples(self, text: str, now: float) -> list[GpuSample]:
        """One sample per `gpu` label in the scrape, stamped `now`."""
        fields: dict[int, dict[str, float]] = defaultdict(dict)
        labels: dict[int, dict[str, str]] = {}
        try:
            for family in text_string_to_metric_families(text):
                for metric in family.samples:
                    gpu = metric.labels.get("gpu", "")
                    if not gpu.isdigit():
                        continue
                    index = int(gpu)
                    labels.setdefault(index, metric.labels)
                    # Counters' sample names gain a "_total"; the family keeps the DCGM field name.
                    values = fields[index]
                    if family.name in NVLINK_ERRORS:
                        values[family.name] = values.get(family.name, 0.0) + metric.value
                    else:
                        values[family.name] = metric.value
        except ValueError as err:
            raise DcgmPayloadError(f"not Prometheus text: {err}") from None
        return [self._sample(i, fields[i], labels[i], now) for i in sorted(fields)]

    def _sample(self, index: int, values: dict[str, float], labels: dict[str, str], now: float) -> GpuSample:
        mapped: dict[str, float | int | None] = {}
        for dcgm_name, name in DIRECT.items():
            value = values.get(dcgm_name)
            mapped[name] = None if value is None else (int(value) if name in COUNTERS else float(value))
        if FB_TOTAL in values:
            mapped["mem_total_mb"] = float(values[FB_TOTAL])
        elif FB_PARTS[0] in values and FB_PARTS[1] in values:
            mapped["mem_total_mb"] = float(sum(values.get(part, 0.0) for part in FB_PARTS))
        nvlink = [values[name] for name in NVLINK_ERRORS if name in values]
        mask = next((values[name] for name in THROTTLE if name in values), None)
        return GpuSample(
            ts=now, node=self.node, gpu=index, uuid=labels.get("UUID"),
            nvlink_errors=int(sum(nvlink)) if nvlink else None,
            throttle=() if mask is None else throttle_reasons(int(mask)),
            xids=self._new_xids(index, values.get(XID)),
            **mapped,
        )

    def _new_xids(self, index: int, gauge: float | None) -> tuple[int, ...]:
        if gauge is None:
            return ()
        value = int(gauge)
        previous = self._last_xid.get(index)
        self._last_xid[index] = value
        if previous is None or value == previous or value == 0:
            return ()
        return (value,)
