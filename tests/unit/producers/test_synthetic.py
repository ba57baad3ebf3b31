"""Synthetic GPUs: deterministic values, scripted faults at their time, runtime injection."""

from __future__ import annotations

import pytest

from trainmedic.common.errors import ConfigError
from trainmedic.producers.faults import parse_fault
from trainmedic.producers.synthetic import SyntheticGpus
from trainmedic.schemas import GpuSample, adapter, encode

T0 = 1_700_000_000.0


def gpus(*specs: str, seed: int = 0) -> SyntheticGpus:
    return SyntheticGpus(["n01", "n02"], 4, start=T0, seed=seed, faults=[parse_fault(s) for s in specs])


def by_gpu(samples: list[GpuSample]) -> dict[tuple[str, int], GpuSample]:
    return {(s.node, s.gpu): s for s in samples}


def test_one_valid_sample_per_gpu_per_round() -> None:
    samples = gpus().sample(T0 + 1)
    assert sorted((s.node, s.gpu) for s in samples) == [(n, g) for n in ("n01", "n02") for g in range(4)]
    for sample in samples:
        assert adapter("telemetry.gpu").validate_json(encode(sample)) == sample
        assert sample.ts == T0 + 1
        assert sample.xids == () and sample.throttle == ()
        assert sample.ecc_dbe == 0 and sample.nvlink_errors == 0
    assert len({s.uuid for s in samples}) == 8


def test_the_same_seed_gives_the_same_samples_and_another_seed_does_not() -> None:
    def run(seed: int) -> list[list[GpuSample]]:
        source = gpus("xid=79,node=n02,gpu=3,at=2s", seed=seed)
        return [source.sample(T0 + t) for t in range(5)]

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_an_xid_rides_on_exactly_one_sample_once_it_is_due() -> None:
    source = gpus("xid=79,node=n02,gpu=3,at=30s")
    assert all(s.xids == () for s in source.sample(T0 + 29.9))
    due = by_gpu(source.sample(T0 + 30.0))
    assert due["n02", 3].xids == (79,)
    assert [k for k, s in due.items() if s.xids] == [("n02", 3)]
    assert all(s.xids == () for s in source.sample(T0 + 31))


def test_counters_only_grow() -> None:
    source = gpus("ecc=dbe,node=n01,gpu=0,at=1s,count=2", "ecc=sbe,node=n01,gpu=0,at=1s",
                  "nvlink=5,gpu=1,at=2s")
    first = by_gpu(source.sample(T0 + 1))
    assert (first["n01", 0].ecc_dbe, first["n01", 0].ecc_sbe) == (2, 1)
    assert first["n02", 0].ecc_dbe == 0
    second = by_gpu(source.sample(T0 + 2))
    assert second["n01", 0].ecc_dbe == 2
    assert second["n01", 1].nvlink_errors == 5 and second["n02", 1].nvlink_errors == 5
    assert second["n01", 2].nvlink_errors == 0


def test_thermal_throttling_lasts_for_its_duration() -> None:
    source = gpus("thermal=hw,node=n01,gpu=2,at=5s,for=10s")
    cool = by_gpu(source.sample(T0 + 4))["n01", 2]
    hot = by_gpu(source.sample(T0 + 5))["n01", 2]
    still = by_gpu(source.sample(T0 + 14.9))["n01", 2]
    after = by_gpu(source.sample(T0 + 15))["n01", 2]
    assert cool.throttle == () and after.throttle == ()
    assert hot.throttle == still.throttle == ("hw_thermal",)
    assert hot.temp_c is not None and cool.temp_c is not None and hot.temp_c > cool.temp_c + 15


def test_a_lost_gpu_stops_reporting_after_its_last_xid() -> None:
    source = gpus("xid=79,node=n02,gpu=3,at=10s", "lost,node=n02,gpu=3,at=10s")
    assert ("n02", 3) in by_gpu(source.sample(T0 + 9))
    last = by_gpu(source.sample(T0 + 10))["n02", 3]
    assert last.xids == (79,) and last.util is None
    later = by_gpu(source.sample(T0 + 11))
    assert ("n02", 3) not in later and len(later) == 7


def test_runtime_injection_counts_from_the_moment_of_injection() -> None:
    source = gpus()
    source.sample(T0 + 100)
    source.inject(parse_fault("xid=79,node=n02,gpu=3"), now=T0 + 100.5)
    source.inject(parse_fault("xid=48,node=n01,gpu=0,at=5s"), now=T0 + 100.5)
    now = by_gpu(source.sample(T0 + 101))
    assert now["n02", 3].xids == (79,) and now["n01", 0].xids == ()
    assert by_gpu(source.sample(T0 + 105.5))["n01", 0].xids == (48,)


@pytest.mark.parametrize(("spec", "says"), [
    ("xid=79,node=n09", "node 'n09'; synthetic nodes: n01, n02"),
    ("xid=79,gpu=4", "gpu 4; each node has GPUs 0-3"),
])
def test_injecting_into_a_gpu_that_does_not_exist_is_refused(spec: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        gpus().inject(parse_fault(spec), now=T0)


def test_an_xid_is_urgent_once_due_and_only_its_gpu_is_sampled_for_it() -> None:
    source = gpus("xid=79,node=n02,gpu=3,at=30.2s")
    source.sample(T0 + 30)
    assert source.urgent(T0 + 30.1) == []
    urgent = source.urgent(T0 + 30.25)
    assert [(s.node, s.gpu, s.xids, s.ts) for s in urgent] == [("n02", 3, (79,), T0 + 30.25)]
    assert urgent[0].util is not None  # a whole sample, not the Xid alone
    assert source.urgent(T0 + 30.3) == []
    assert all(s.xids == () for s in source.sample(T0 + 31))
