"""The NVML source through its real code, over a stand-in for the pynvml module."""

from __future__ import annotations

import logging

import pynvml
import pytest

from tests.unit.producers import fake_pynvml
from tests.unit.producers.fake_pynvml import FakeGpu, FakeNvml
from trainmedic.producers.nvml import NvmlGpus, NvmlUnavailable

T = 1_700_000_000.0


def test_the_stand_in_uses_the_real_pynvml_names_and_values() -> None:
    fake = FakeNvml([])
    for name in dir(fake_pynvml):
        value = getattr(fake_pynvml, name)
        if name.startswith(("NVML_", "nvmlEventType", "nvmlClocks")):
            assert getattr(pynvml, name) == value, name
        elif name.startswith("NVMLError"):
            assert issubclass(getattr(pynvml, name), pynvml.NVMLError), name
            if name != "NVMLError":
                assert getattr(pynvml, name)().value == value().value, name
    for name in dir(fake):
        if name.startswith("nvml") and callable(getattr(fake, name)):
            assert callable(getattr(pynvml, name)), name


def four_gpus() -> list[FakeGpu]:
    return [FakeGpu(uuid=f"GPU-{i}", links={0: {0: 1, 1: 0, 2: 2, 3: 0}, 1: {0: 3}}) for i in range(4)]


def opened(nvml: FakeNvml) -> NvmlGpus:
    source = NvmlGpus("n01", nvml)
    source.open()
    return source


def test_every_field_is_read_and_converted() -> None:
    gpus = four_gpus()
    gpus[2].ecc = {0: 7, 1: 1}
    gpus[2].throttle = fake_pynvml.nvmlClocksEventReasonHwThermalSlowdown | 0x4
    samples = opened(FakeNvml(gpus)).sample(T)
    assert [s.gpu for s in samples] == [0, 1, 2, 3]
    s = samples[2]
    assert (s.node, s.uuid, s.ts) == ("n01", "GPU-2", T)
    assert (s.util, s.mem_used_mb, s.mem_total_mb) == (95.0, 60 * 1024.0, 80 * 1024.0)
    assert (s.temp_c, s.power_w) == (61.0, 500.0)
    assert (s.ecc_sbe, s.ecc_dbe) == (7, 1)
    # link 0: replay 1 + CRC flit 2; link 1: replay 3 (its other counters are not supported)
    assert s.nvlink_errors == 6
    assert s.throttle == ("sw_power_cap", "hw_thermal")
    assert samples[0].throttle == () and samples[0].ecc_dbe == 0


def test_what_a_gpu_does_not_support_is_null_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    gpus = four_gpus()
    gpus[1].unsupported = {"temperature", "power", "ecc", "nvlink", "throttle", "memory"}
    source = opened(FakeNvml(gpus))
    with caplog.at_level(logging.INFO, logger="trainmedic.producers.nvml"):
        source.sample(T)
        s = source.sample(T + 1)[1]
    assert (s.temp_c, s.power_w, s.ecc_sbe, s.ecc_dbe, s.nvlink_errors) == (None,) * 5
    assert (s.mem_used_mb, s.mem_total_mb, s.throttle, s.util) == (None, None, (), 95.0)
    assert sum("GPU 1: temperature unavailable (Not Supported)" in r.message for r in caplog.records) == 1


def test_xids_ride_on_the_next_sample_of_their_gpu_and_are_not_lost_between_samples() -> None:
    nvml = FakeNvml(four_gpus())
    source = opened(nvml)
    assert nvml.registered == {0, 1, 2, 3}
    nvml.xid(3, 79)
    nvml.xid(1, 13)
    nvml.xid(3, 48)
    samples = source.sample(T)
    assert [s.xids for s in samples] == [(), (13,), (), (79, 48)]
    assert all(s.xids == () for s in source.sample(T + 1))


def test_a_lost_gpu_is_sampled_no_more_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    gpus = four_gpus()
    nvml = FakeNvml(gpus)
    source = opened(nvml)
    gpus[2].lost = True
    nvml.xid(2, 79)
    with caplog.at_level(logging.ERROR, logger="trainmedic.producers.nvml"):
        last = source.sample(T)
    assert [s.gpu for s in last] == [0, 1, 2, 3]
    assert last[2].xids == (79,) and last[2].util is None  # its last words
    assert "GPU 2 (GPU-2) on n01 is lost (NVML_ERROR_GPU_IS_LOST)" in caplog.text
    calls = len(nvml.calls)
    assert [s.gpu for s in source.sample(T + 1)] == [0, 1, 3]
    assert [s.gpu for s in source.sample(T + 2)] == [0, 1, 3]
    assert len([c for c in nvml.calls[calls:] if c == "util"]) == 6  # GPU 2 is not even asked


def test_a_gpu_lost_without_xids_just_goes_silent() -> None:
    gpus = four_gpus()
    source = opened(FakeNvml(gpus))
    gpus[0].lost = True
    assert [s.gpu for s in source.sample(T)] == [1, 2, 3]


def test_no_driver_is_a_clear_error() -> None:
    with pytest.raises(NvmlUnavailable, match="NVML did not answer: NVML Shared Library Not Found"):
        NvmlGpus("n01", FakeNvml([], library=False)).open()


def test_close_releases_the_event_set_and_nvml() -> None:
    nvml = FakeNvml(four_gpus())
    opened(nvml).close()
    assert nvml.calls[-2:] == ["free", "shutdown"]


def test_an_xid_between_rounds_is_sampled_at_once_for_its_gpu_alone() -> None:
    nvml = FakeNvml(four_gpus())
    source = opened(nvml)
    source.sample(T)
    assert source.urgent(T + 0.05) == []
    nvml.xid(2, 79)
    urgent = source.urgent(T + 0.1)
    assert [(s.gpu, s.xids, s.ts) for s in urgent] == [(2, (79,), T + 0.1)]
    assert urgent[0].util is not None
    assert source.urgent(T + 0.15) == []
    assert all(s.xids == () for s in source.sample(T + 1))


def test_a_gpu_lost_with_an_xid_between_rounds_gets_its_last_words_out_at_once() -> None:
    gpus = four_gpus()
    nvml = FakeNvml(gpus)
    source = opened(nvml)
    gpus[1].lost = True
    nvml.xid(1, 79)
    assert [(s.gpu, s.xids, s.util) for s in source.urgent(T)] == [(1, (79,), None)]
    assert [s.gpu for s in source.sample(T + 1)] == [0, 2, 3]
