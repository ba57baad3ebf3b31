"""Clock-throttle reasons: NVML's bitmask (nvmlClocksEventReason*, the same bits in DCGM's
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS) as the strings of the `throttle` field."""

from __future__ import annotations

# bit -> name, in bit order. The bits are fixed by the NVML API.
REASONS: tuple[tuple[int, str], ...] = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal"),
    (0x040, "hw_thermal"),
    (0x080, "hw_power_brake"),
    (0x100, "display_clocks"),
)


def throttle_reasons(mask: int) -> tuple[str, ...]:
    """The names of the bits set in `mask`; unknown bits are ignored."""
    return tuple(name for bit, name in REASONS if mask & bit)
