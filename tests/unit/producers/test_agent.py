"""The host agent's heartbeats: links as sysfs shows them, unless a scripted flap holds one down."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.producers.sysfs import cluster_node
from trainmedic.common.errors import ConfigError
from trainmedic.producers.agent import HostAgent, open_agent
from trainmedic.producers.config import HostAgentConfig
from trainmedic.producers.faults import LinkFlap, parse_fault
from trainmedic.schemas import adapter, encode

T0 = 1_700_000_000.0


def flap(spec: str) -> LinkFlap:
    fault = parse_fault(spec)
    assert isinstance(fault, LinkFlap)
    return fault


def agent(root: Path, *flaps: str) -> HostAgent:
    config = HostAgentConfig(node="n01", interval_s=0.5, sysfs=cluster_node(root),
                             inject=tuple(flap(f) for f in flaps))
    return open_agent(config, T0)


def ups(agent: HostAgent, now: float) -> dict[str, bool]:
    return {link.name: link.up for link in agent.heartbeat(now).links}


def test_a_heartbeat_is_valid_and_promises_the_interval(tmp_path: Path) -> None:
    beat = agent(tmp_path).heartbeat(T0 + 1)
    assert adapter("telemetry.node").validate_json(encode(beat)) == beat
    assert (beat.node, beat.ts, beat.interval) == ("n01", T0 + 1, 0.5)
    assert [link.name for link in beat.links] == ["eth0", "eth1", "ib0", "mlx5_0:1", "mlx5_1:1"]


def test_a_scripted_flap_holds_the_link_down_for_its_duration(tmp_path: Path) -> None:
    a = agent(tmp_path, "flap=eth0,at=20s,for=3s")
    assert ups(a, T0 + 19.9)["eth0"] is True
    assert ups(a, T0 + 20)["eth0"] is False
    assert ups(a, T0 + 22.9) == {
        "eth0": False, "eth1": False, "ib0": True, "mlx5_0:1": True, "mlx5_1:1": False,
    }
    assert ups(a, T0 + 23)["eth0"] is True


def test_a_runtime_flap_counts_from_its_injection(tmp_path: Path) -> None:
    a = agent(tmp_path)
    a.inject(flap("flap=ib0,for=2s"), now=T0 + 100)
    assert ups(a, T0 + 100.5)["ib0"] is False
    assert ups(a, T0 + 102)["ib0"] is True


def test_only_links_in_the_heartbeat_can_flap(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no link 'eth7' to flap"):
        agent(tmp_path, "flap=eth7")


def test_a_flap_for_another_node_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="flap for node 'n02' sent to the agent of 'n01'"):
        agent(tmp_path, "flap=eth0,node=n02")


def test_configured_links_are_reported_even_when_absent(tmp_path: Path) -> None:
    config = HostAgentConfig(node="n01", links=("eth0", "eth5"), sysfs=cluster_node(tmp_path))
    assert ups(open_agent(config, T0), T0) == {"eth0": True, "eth5": False}


def test_heartbeats_say_the_node_leaves_once_told(tmp_path: Path) -> None:
    beating = agent(tmp_path)
    assert not beating.heartbeat(T0 + 1).leaving
    beating.leave()
    assert beating.heartbeat(T0 + 2).leaving
