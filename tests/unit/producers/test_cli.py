"""`trainmedic gpu` and `trainmedic agent`: refusals an operator can act on."""

from __future__ import annotations

import pynvml
import pytest

from trainmedic.cli import main


def test_without_a_driver_the_gpu_producer_lists_the_other_sources(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    def no_library() -> None:
        raise pynvml.NVMLError_LibraryNotFound()

    monkeypatch.setattr(pynvml, "nvmlInit", no_library)
    assert main(["gpu", "--node", "n01"]) == 1
    err = capsys.readouterr().err
    assert "no NVIDIA driver answers here" in err and "NVML Shared Library Not Found" in err
    assert "--source dcgm --dcgm-url" in err and "--source synthetic" in err


@pytest.mark.parametrize(("argv", "says"), [
    (["gpu", "--source", "synthetic", "--inject", "xid=boom"], "bad fault 'xid=boom'"),
    (["gpu", "--source", "synthetic", "--inject", "flap=eth0"], "flaps are injected by `trainmedic agent`"),
    (["gpu", "--inject", "xid=79"], "need --source synthetic"),
    (["gpu", "--source", "dcgm"], "--source dcgm needs --dcgm-url"),
    (["gpu", "--source", "synthetic", "--nodes", "n01", "--inject", "xid=79,node=n02"], "node 'n02'"),
    (["agent", "--inject", "xid=79"], "GPU faults are injected by `trainmedic gpu"),
    (["agent", "--sysfs", "/nonexistent", "--inject", "flap=eth0"], "no link 'eth0' to flap"),
])
def test_bad_flags_are_refused_with_the_reason(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(argv) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["gpu", "--interval", "soon"], ["agent", "--links", "eth0,,ib0"]])
def test_malformed_values_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
