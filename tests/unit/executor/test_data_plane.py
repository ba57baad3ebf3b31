"""The node's data plane (issue 44): the NIC its ranks meet over, named by data_interface or found from
data_address on this host's NICs, given to every rank as GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME (the
job's env winning) with the address as TRAINMEDIC_NODE_ADDRESS; nothing configured, nothing set."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pytest

from trainmedic.bus.settings import KafkaSettings
from trainmedic.cli import main
from trainmedic.common.errors import ConfigError
from trainmedic.recovery.executor import cli
from trainmedic.recovery.executor.command_loop import Executor
from trainmedic.recovery.executor.config import ExecutorConfig
from trainmedic.recovery.executor.core.rank_env import rank_env
from trainmedic.recovery.executor.data_plane import DataPlane, host_addresses, resolve
from trainmedic.schemas import Command, CommandAction, WorkerSpec

IFNAMES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
NICS = {"lo": ("127.0.0.1", "::1"), "eth0": ("10.0.0.2", "fd00::2"), "ib0": ("fd00::9",), "eth1": ()}


def test_loopback_holds_127_0_0_1_on_this_host_and_is_found_from_either_side() -> None:
    assert "127.0.0.1" in host_addresses()["lo"]
    assert resolve(None, "127.0.0.1") == DataPlane("lo", "127.0.0.1")
    assert resolve("lo", None) == DataPlane("lo", "127.0.0.1")
    assert resolve("lo", "127.0.0.1") == DataPlane("lo", "127.0.0.1")
    assert resolve(None, None) is None  # nothing configured: no data plane, as before


def test_the_address_finds_its_nic_and_the_nic_its_first_ipv4_address() -> None:
    assert resolve(None, "10.0.0.2", NICS) == DataPlane("eth0", "10.0.0.2")
    assert resolve(None, "fd00:0::2", NICS) == DataPlane("eth0", "fd00::2")  # as the NIC spells it
    assert resolve("eth0", None, NICS) == DataPlane("eth0", "10.0.0.2")
    assert resolve("ib0", None, NICS) == DataPlane("ib0", "fd00::9")
    assert resolve("eth1", None, NICS) == DataPlane("eth1", None)  # no address: no check in the ranks


@pytest.mark.parametrize(("interface", "address", "says"), [
    (None, "10.0.0.9", "data_address 10.0.0.9 is held by no NIC of this host (its NICs: lo: 127.0.0.1, ::1; "
                       "eth0: 10.0.0.2, fd00::2; ib0: fd00::9; eth1: no address)"),
    ("eth9", None, "data_interface 'eth9' is no NIC of this host (its NICs: lo: 127.0.0.1"),
    ("lo", "10.0.0.2", "data_address 10.0.0.2 is held by eth0, not by data_interface 'lo'"),
    (None, "node-1", "data_address 'node-1' is not an IP address"),
])
def test_what_no_nic_holds_is_a_config_error_that_lists_the_nics(interface, address, says) -> None:
    with pytest.raises(ConfigError) as err:
        resolve(interface, address, NICS)
    assert says in str(err.value)


def test_the_options_are_flags_and_variables_checked_at_start(monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setenv("TRAINMEDIC_HOME", str(tmp_path))
    monkeypatch.setenv("TRAINMEDIC_EXECUTOR_RANKS_AS_ROOT", "true")
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--node", "n1", "--insecure", "--data-address", "127.0.0.1"])
    assert cli.build_config(cli.OPTIONS, cli.EXECUTOR, args).data_plane == DataPlane("lo", "127.0.0.1")
    monkeypatch.setenv("TRAINMEDIC_EXECUTOR_DATA_INTERFACE", "lo")
    args = parser.parse_args(["--node", "n1", "--insecure"])
    assert cli.build_config(cli.OPTIONS, cli.EXECUTOR, args).data_plane == DataPlane("lo", "127.0.0.1")
    monkeypatch.delenv("TRAINMEDIC_EXECUTOR_DATA_INTERFACE")
    assert cli.build_config(cli.OPTIONS, cli.EXECUTOR, args).data_plane is None
    assert main(["executor", "--node", "n1", "--insecure", "--data-address", "192.0.2.254",
                 "--bootstrap", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "data_address 192.0.2.254 is held by no NIC of this host (its NICs: lo: 127.0.0.1" in err
    with pytest.raises(ValueError, match="not checked against this host's NICs"):
        ExecutorConfig(node="n1", state_dir=tmp_path, insecure=True, data_interface="lo")


def launch_env(tmp_path: Path, data_plane: DataPlane | None, job_env: dict[str, str]) -> dict[str, str]:
    """The environment the real executor gives rank 0 of a command whose job's env is `job_env`."""
    config = ExecutorConfig(node="n1", state_dir=tmp_path / "state", insecure=True, warm_start=False,
                            data_plane=data_plane)
    executor = Executor(config, KafkaSettings.from_env({"TRAINMEDIC_KAFKA_BOOTSTRAP": "127.0.0.1:1"}))
    executor.reporter.start()
    try:
        worker = WorkerSpec(submission="s1", rendezvous_key="ab" * 32, ranks=(2, 3), world_size=4,
                            master_addr="10.0.0.1", master_port=29500, command=("sleep", "1"), env=job_env)
        command = Command(ts=time.time(), node="n1", id="c1", job="j", generation=0,
                          action=CommandAction.START, worker=worker)
        return executor.applier._rank_env(command, 0)
    finally:
        executor.reporter.close()


def test_every_rank_gets_the_nic_and_the_address_and_the_jobs_env_wins(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth7")  # the executor's own: the configured NIC wins over it
    env = launch_env(tmp_path, DataPlane("lo", "127.0.0.1"), {})
    assert (env["GLOO_SOCKET_IFNAME"], env["NCCL_SOCKET_IFNAME"]) == ("lo", "lo")
    assert env["TRAINMEDIC_NODE_ADDRESS"] == "127.0.0.1"
    env = launch_env(tmp_path, DataPlane("lo", "127.0.0.1"), {"NCCL_SOCKET_IFNAME": "ib0"})
    assert (env["GLOO_SOCKET_IFNAME"], env["NCCL_SOCKET_IFNAME"]) == ("lo", "ib0")


def test_without_a_data_plane_a_rank_gets_no_nic_and_no_address(monkeypatch, tmp_path: Path) -> None:
    for name in IFNAMES:
        monkeypatch.delenv(name, raising=False)
    env = launch_env(tmp_path, None, {})
    assert not {*IFNAMES, "TRAINMEDIC_NODE_ADDRESS"} & env.keys()
    assert "TRAINMEDIC_NODE_ADDRESS" not in launch_env(tmp_path, DataPlane("eth1", None), {})


def test_the_nodes_layer_sits_between_the_executors_environment_and_the_jobs() -> None:
    node = DataPlane("eth0", "10.0.0.2").rank_env()
    parent = {"PATH": "/bin", "GLOO_SOCKET_IFNAME": "docker0"}
    assert rank_env(parent, (), {}, {"RANK": "0"}, node=node)["GLOO_SOCKET_IFNAME"] == "eth0"
    env = rank_env(parent, (), {}, {"RANK": "0"}, job={"GLOO_SOCKET_IFNAME": "eth1"}, node=node)
    assert (env["GLOO_SOCKET_IFNAME"], env["NCCL_SOCKET_IFNAME"]) == ("eth1", "eth0")
    assert rank_env(parent, (), {}, {"RANK": "0"}) == rank_env(parent, (), {}, {"RANK": "0"}, node=None)


def test_a_job_may_name_its_own_nic_but_not_the_nodes_address() -> None:
    from trainmedic.recovery.coordinator.core.job_bounds import job_problems
    from trainmedic.schemas import JobSpec

    def problems(env: dict[str, str]) -> list[str]:
        spec = JobSpec(id="llm", nodes=("n1",), throughput={1: 1e15}, command=("python", "t.py"), env=env)
        return job_problems(spec, {"n1"}.__contains__)

    assert problems({"GLOO_SOCKET_IFNAME": "eth1", "NCCL_SOCKET_IFNAME": "ib0"}) == []
    assert "env sets TRAINMEDIC_NODE_ADDRESS" in problems({"TRAINMEDIC_NODE_ADDRESS": "10.0.0.9"})[0]
