"""A fake sysfs tree in a temporary directory: NICs and InfiniBand ports in the kernel's layout."""

from __future__ import annotations

from pathlib import Path


def nic(
    root: Path, name: str, operstate: str = "up", carrier: str | None = "1", virtual: bool = False,
) -> None:
    """A NIC; `carrier=None` makes the file unreadable, as the kernel does for an admin-down interface."""
    base = root / "class" / "net" / name
    base.mkdir(parents=True, exist_ok=True)
    (base / "operstate").write_text(operstate + "\n")
    if carrier is None:
        (base / "carrier").mkdir(exist_ok=True)  # reading a directory fails with an OSError, like EINVAL
    else:
        (base / "carrier").write_text(carrier + "\n")
    if virtual:
        (root / "devices" / "virtual" / "net" / name).mkdir(parents=True, exist_ok=True)


def ib_port(
    root: Path, device: str, port: int, state: str = "4: ACTIVE", link_downed: int | None = 0,
) -> None:
    base = root / "class" / "infiniband" / device / "ports" / str(port)
    (base / "counters").mkdir(parents=True, exist_ok=True)
    (base / "state").write_text(state + "\n")
    if link_downed is not None:
        (base / "counters" / "link_downed").write_text(f"{link_downed}\n")


def cluster_node(root: Path) -> Path:
    """A typical GPU node: two Ethernet NICs, IPoIB, loopback, a bridge, and two HCA ports."""
    nic(root, "lo", "unknown", "1", virtual=True)
    nic(root, "docker0", "down", "0", virtual=True)
    nic(root, "eth0")
    nic(root, "eth1", "down", None)
    nic(root, "ib0")
    ib_port(root, "mlx5_0", 1, link_downed=2)
    ib_port(root, "mlx5_1", 1, "1: DOWN", link_downed=5)
    return root
