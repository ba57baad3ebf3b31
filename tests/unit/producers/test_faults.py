"""The fault-script grammar: what parses into which fault, and how bad specs are refused."""

from __future__ import annotations

import pytest

from trainmedic.producers.faults import (
    EccFault,
    FaultSpecError,
    GpuLostFault,
    LinkFlap,
    NvlinkFault,
    ThermalFault,
    XidFault,
    parse_fault,
)


@pytest.mark.parametrize(("spec", "fault"), [
    ("xid=79,node=n02,gpu=3,at=30s", XidFault(code=79, node="n02", gpu=3, at_s=30.0)),
    ("xid=48", XidFault(code=48)),
    ("ecc=dbe,node=n01,gpu=0,count=2", EccFault(kind="dbe", count=2, node="n01", gpu=0)),
    ("ecc=sbe,at=500ms", EccFault(kind="sbe", at_s=0.5)),
    ("nvlink=5,gpu=1,at=10s", NvlinkFault(errors=5, gpu=1, at_s=10.0)),
    ("thermal=hw,node=n01,at=5s,for=20s", ThermalFault(kind="hw", node="n01", at_s=5.0, for_s=20.0)),
    ("thermal=sw", ThermalFault(kind="sw")),
    ("thermal=sw,at=1.5,for=1h", ThermalFault(kind="sw", at_s=1.5, for_s=3600.0)),
    ("lost,node=n02,gpu=3,at=2m", GpuLostFault(node="n02", gpu=3, at_s=120.0)),
    ("flap=eth0,at=20s,for=3s", LinkFlap(link="eth0", at_s=20.0, for_s=3.0)),
    ("flap=mlx5_0:1", LinkFlap(link="mlx5_0:1", at_s=0.0, for_s=3.0)),
    (" xid = 79 , gpu = 2 ", XidFault(code=79, gpu=2)),
])
def test_specs_parse_into_frozen_faults(spec: str, fault: object) -> None:
    assert parse_fault(spec) == fault


def test_a_fault_is_frozen() -> None:
    fault = parse_fault("xid=79")
    with pytest.raises(AttributeError):
        fault.code = 48  # type: ignore[misc]  # the point: frozen dataclasses refuse it


@pytest.mark.parametrize(("spec", "says"), [
    ("", "empty"),
    ("boom=1", "unknown fault kind 'boom'; known: xid, ecc, nvlink, thermal, lost, flap"),
    ("xid", "xid needs a value: xid=<an Xid code"),
    ("xid=abc", "xid must be an integer >= 1, not 'abc'"),
    ("xid=0", "xid must be an integer >= 1"),
    ("xid=79,gpu=-1", "gpu must be an integer >= 0"),
    ("xid=79,color=red", "unknown key 'color' for xid; known: at, gpu, node"),
    ("xid=79,for=3s", "unknown key 'for' for xid"),
    ("xid=79,at=soon", "'soon' is not a duration"),
    ("xid=79,at=30s,at=40s", "at given twice"),
    ("xid=79,node", "'node' is not key=value"),
    ("ecc=tbe", "ecc must be sbe or dbe, not 'tbe'"),
    ("ecc=dbe,count=0", "count must be an integer >= 1"),
    ("thermal=hot", "thermal must be hw or sw"),
    ("lost=1", "lost takes no value"),
    ("flap=eth0,gpu=1", "unknown key 'gpu' for flap; known: at, for, node"),
    ("flap=eth0,for=0s", "for must be longer than 0s"),
])
def test_bad_specs_say_what_is_wrong(spec: str, says: str) -> None:
    with pytest.raises(FaultSpecError) as err:
        parse_fault(spec)
    assert f"bad fault {spec!r}" in str(err.value)
    assert says in str(err.value)


def test_omitted_node_and_gpu_target_everything() -> None:
    fault = parse_fault("xid=79,gpu=3")
    assert fault.targets("n01", 3) and fault.targets("n09", 3)
    assert not fault.targets("n01", 2)
