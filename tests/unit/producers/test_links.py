"""Link state from a fake sysfs tree."""

from __future__ import annotations

from pathlib import Path

from tests.unit.producers.sysfs import cluster_node, ib_port, nic
from trainmedic.producers.links import discover_links, missing_links, read_links


def test_discovery_skips_loopback_and_virtual_interfaces(tmp_path: Path) -> None:
    assert discover_links(cluster_node(tmp_path)) == ("eth0", "eth1", "ib0", "mlx5_0:1", "mlx5_1:1")


def test_discovery_of_an_empty_tree_finds_nothing(tmp_path: Path) -> None:
    assert discover_links(tmp_path) == ()


def test_states(tmp_path: Path) -> None:
    root = cluster_node(tmp_path)
    links = {link.name: link for link in read_links(root, discover_links(root))}
    assert {name: link.up for name, link in links.items()} == {
        "eth0": True, "eth1": False, "ib0": True, "mlx5_0:1": True, "mlx5_1:1": False,
    }
    assert links["mlx5_0:1"].model_dump()["link_downed"] == 2
    assert links["mlx5_1:1"].model_dump()["link_downed"] == 5
    assert "link_downed" not in links["eth0"].model_dump()


def test_a_nic_needs_both_carrier_and_operstate(tmp_path: Path) -> None:
    nic(tmp_path, "up_no_carrier", "up", "0")
    nic(tmp_path, "carrier_but_dormant", "dormant", "1")
    nic(tmp_path, "unknown_with_carrier", "unknown", "1")
    names = ("up_no_carrier", "carrier_but_dormant", "unknown_with_carrier")
    assert [link.up for link in read_links(tmp_path, names)] == [False, False, True]


def test_a_named_link_that_is_not_there_is_down_and_missing(tmp_path: Path) -> None:
    root = cluster_node(tmp_path)
    ib_port(root, "mlx5_2", 1, "4: ACTIVE", link_downed=None)
    assert [(link.name, link.up) for link in read_links(root, ("eth9", "mlx5_0:2", "mlx5_2:1"))] == [
        ("eth9", False), ("mlx5_0:2", False), ("mlx5_2:1", True),
    ]
    assert missing_links(root, ("eth0", "eth9", "mlx5_0:2", "docker0")) == ["eth9", "mlx5_0:2"]
