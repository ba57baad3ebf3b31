"""`trainmedic gpu` and `trainmedic agent`: refusals an operator can act on."""

from __future__ import annotations

from pathlib import Path

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
    assert "--source dcgm --dcgm-url" in err and "--source synthetic --synthetic-nodes" in err


@pytest.mark.parametrize(("argv", "says"), [
    (["gpu", "--source", "synthetic", "--inject", "xid=boom"], "bad fault 'xid=boom'"),
    (["gpu", "--source", "synthetic", "--inject", "flap=eth0"], "flaps are injected by `trainmedic agent`"),
    (["gpu", "--inject", "xid=79"], "need --source synthetic"),
    (["gpu", "--source", "dcgm"], "--source dcgm needs --dcgm-url"),
    (["gpu", "--source", "synthetic", "--synthetic-nodes", "n01", "--inject", "xid=79,node=n02"],
     "node 'n02'"),
    (["gpu", "--interval-s", "soon"], "--interval-s: 'soon' is not a duration"),
    (["gpu", "--gpus-per-node", "0"], "--gpus-per-node: Input should be greater than or equal to 1"),
    (["agent", "--links", "eth0,,ib0"], "--links: 'eth0,,ib0' has an empty item"),
    (["agent", "--links", "eth0,eth0"], "--links: names a link twice"),
    (["agent", "--inject", "xid=79"], "GPU faults are injected by `trainmedic gpu"),
    (["agent", "--sysfs", "/nonexistent", "--inject", "flap=eth0"], "no link 'eth0' to flap"),
])
def test_bad_flags_are_refused_with_the_reason(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(argv) == 2
    assert says in capsys.readouterr().err


def test_options_come_from_variables_and_the_config_file_and_flags_win(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "gpu.yaml"
    config.write_text("source: dcgm\ndelivery: {max_buffered: 0}\n")
    assert main(["gpu", "--config", str(config), "--dcgm-url", "http://x:9400/metrics"]) == 2
    err = capsys.readouterr().err
    assert f"{config}: delivery.max_buffered: Input should be greater than or equal to 1" in err
    monkeypatch.setenv("TRAINMEDIC_GPU_MAX_BUFFERED", "-5")
    assert main(["gpu", "--config", str(config), "--dcgm-url", "http://x:9400/metrics"]) == 2
    assert "TRAINMEDIC_GPU_MAX_BUFFERED: Input should be" in capsys.readouterr().err
    assert main(["gpu", "--config", str(config), "--max-buffered", "-7"]) == 2
    assert "--max-buffered: Input should be" in capsys.readouterr().err
