"""`trainmedic gpu` and `trainmedic agent`: refusals an operator can act on."""

from __future__ import annotations

import argparse
from pathlib import Path

import pynvml
import pytest

from trainmedic.cli import build_parser, main


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


def flags(command: str) -> set[str]:
    parser = build_parser(command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {flag for action in sub.choices[command]._actions for flag in action.option_strings}


def test_node_spells_each_option_as_the_single_services_do() -> None:
    node = flags("node")
    for command, prefix in (("gpu", "--gpu-"), ("agent", "--agent-"), ("executor", "--")):
        for flag in flags(command) - {"-h", "--help", "--node", "--synthetic-nodes"}:
            assert flag in node or prefix + flag.removeprefix("--") in node, (command, flag)
    assert {"--source", "--gpus-per-node", "--gpu-control", "--agent-control"} <= node
    assert "--gpu-source" not in node and "--interval-s" not in node


def test_node_builds_its_three_configs_from_the_demos_flags(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    from trainmedic import node as node_cli
    from trainmedic.recovery import keyring

    key_id = keyring.generate_key(tmp_path / "keys", now=1.0)
    node_key = keyring.generate_key(tmp_path / "keys", now=1.0, role=keyring.node_role("n01"))
    monkeypatch.setenv("TRAINMEDIC_HOME", str(tmp_path))
    monkeypatch.setenv("TRAINMEDIC_GPU_SEED", "7")
    monkeypatch.setenv("TRAINMEDIC_EXECUTOR_RANKS_AS_ROOT", "true")  # as the local cluster's root nodes
    config = tmp_path / "node.yaml"
    config.write_text("agent: {interval_s: 0.5}\nexecutor: {stop_grace_s: 3}\n")
    args = build_parser("node").parse_args([
        "node", "--node", "n01", "--source", "synthetic", "--gpus-per-node", "2", "--gpu-control", "g",
        "--agent-control", "a", "--links", "ib0", "--state-dir", "s", "--stop-grace-s", "5",
        "--config", str(config),
    ])
    executor = node_cli.executor_cli.build_config(node_cli.OPTIONS, node_cli.EXECUTOR, args)
    gpu = node_cli.OPTIONS.build(node_cli.GPU, args, node=lambda _: executor.node)
    agent = node_cli.OPTIONS.build(node_cli.AGENT, args, node=lambda _: executor.node)
    assert (executor.node, executor.stop_grace_s, set(executor.trusted.keys), str(executor.state_dir)) == (
        "n01", 5.0, {key_id}, "s")  # the node's own key signs its acks; it is never trusted for commands
    assert executor.node_key.key_id == node_key
    assert (gpu.node, gpu.source, gpu.gpus_per_node, gpu.seed, str(gpu.control)) == (
        "n01", "synthetic", 2, 7, "g")
    assert (agent.node, agent.links, agent.interval_s, str(agent.control)) == ("n01", ("ib0",), 0.5, "a")
