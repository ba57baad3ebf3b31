"""dcgm-exporter text to gpu_samples, on a recorded payload of a 4 x H100 node."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmedic.producers.dcgm import DcgmMapper, DcgmPayloadError
from trainmedic.schemas import adapter, encode

PAYLOAD = (Path(__file__).parents[2] / "fixtures" / "producers" / "dcgm_exporter_h100.txt").read_text()
T = 1_700_000_000.0


def set_value(text: str, field: str, gpu: int, value: str) -> str:
    """The payload with one metric of one GPU changed."""
    lines = []
    for line in text.splitlines():
        if line.startswith(field + "{") and f'gpu="{gpu}"' in line:
            line = line.rsplit(" ", 1)[0] + " " + value
        lines.append(line)
    return "\n".join(lines) + "\n"


def test_each_gpu_label_becomes_one_valid_sample() -> None:
    samples = DcgmMapper("gpu-node-07").samples(PAYLOAD, T)
    assert [s.gpu for s in samples] == [0, 1, 2, 3]
    for sample in samples:
        assert adapter("telemetry.gpu").validate_json(encode(sample)) == sample
        assert sample.node == "gpu-node-07" and sample.ts == T
    s = samples[0]
    assert s.uuid == "GPU-5f9c3a52-7d1e-8b41-2c6a-0e4f1d9b7a31"
    assert (s.util, s.temp_c, s.power_w) == (97.0, 41.0, 512.337)
    assert (s.mem_used_mb, s.mem_total_mb) == (63582.0, 63582.0 + 17419.0 + 558.0)
    assert (s.ecc_sbe, s.ecc_dbe, s.nvlink_errors) == (0, 0, 0)


def test_counters_nvlink_sum_and_throttle_bits() -> None:
    samples = DcgmMapper("n").samples(PAYLOAD, T)
    assert samples[2].ecc_sbe == 12
    assert samples[1].nvlink_errors == 2 + 1 + 4 + 0  # CRC flit + CRC data + replay + recovery
    assert samples[2].throttle == ("sw_power_cap",)
    assert samples[3].throttle == ("sw_thermal", "hw_thermal")  # 96 = 0x20 | 0x40


def test_the_xid_gauge_is_a_baseline_first_then_each_change_is_an_xid() -> None:
    mapper = DcgmMapper("n")
    assert all(s.xids == () for s in mapper.samples(PAYLOAD, T))  # GPU 1's old Xid 31 is not news
    assert all(s.xids == () for s in mapper.samples(PAYLOAD, T + 1))
    changed = set_value(PAYLOAD, "DCGM_FI_DEV_XID_ERRORS", 1, "79")
    assert [s.xids for s in mapper.samples(changed, T + 2)] == [(), (79,), (), ()]
    assert [s.xids for s in mapper.samples(changed, T + 3)] == [(), (), (), ()]
    again = set_value(changed, "DCGM_FI_DEV_XID_ERRORS", 3, "48")
    assert [s.xids for s in mapper.samples(again, T + 4)] == [(), (), (), (48,)]


def test_missing_fields_are_null() -> None:
    kept = [line for line in PAYLOAD.splitlines()
            if not any(f in line for f in ("ECC_", "NVLINK_", "CLOCK_THROTTLE", "POWER_USAGE", "FB_FREE"))]
    sample = DcgmMapper("n").samples("\n".join(kept) + "\n", T)[0]
    assert (sample.ecc_sbe, sample.ecc_dbe, sample.nvlink_errors, sample.power_w) == (None,) * 4
    assert sample.mem_used_mb == 63582.0 and sample.mem_total_mb is None
    assert sample.throttle == ()


def test_a_payload_that_is_not_prometheus_text_is_refused() -> None:
    with pytest.raises(DcgmPayloadError):
        DcgmMapper("n").samples('DCGM_FI_DEV_GPU_UTIL{gpu="0" 97\n', T)


def test_an_empty_scrape_has_no_samples() -> None:
    assert DcgmMapper("n").samples("", T) == []
