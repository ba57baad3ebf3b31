"""Data-plane link state from sysfs (`sysfs` is a parameter: tests pass a fake tree): NICs and
InfiniBand ports (docs/producers.md, "Host agent: `trainmedic agent`").
"""

from __future__ import annotations

from pathlib import Path

from trainmedic.schemas import LinkState


def discover_links(sysfs: Path) -> tuple[str, ...]:
    """Every non-loopback, non-virtual NIC and every InfiniBand port, sorted by name."""
    net = sysfs / "class" / "net"
    nics = [
        entry.name for entry in _children(net)
        if entry.name != "lo" and not (sysfs / "devices" / "virtual" / "net" / entry.name).exists()
    ]
    ports = [
        f"{device.name}:{port.name}"
        for device in _children(sysfs / "class" / "infiniband")
        for port in _children(device / "ports")
    ]
    return tuple(sorted(nics) + sorted(ports))


def read_links(sysfs: Path, names: tuple[str, ...]) -> list[LinkState]:
    """The state of each named link; a link that has vanished from sysfs is down."""
    return [_ib_port(sysfs, name) if ":" in name else _nic(sysfs, name) for name in names]


def missing_links(sysfs: Path, names: tuple[str, ...]) -> list[str]:
    """The named links sysfs does not show (they are reported down)."""
    return [name for name in names if not _base(sysfs, name).exists()]


def _base(sysfs: Path, name: str) -> Path:
    if ":" in name:
        device, _, port = name.partition(":")
        return sysfs / "class" / "infiniband" / device / "ports" / port
    return sysfs / "class" / "net" / name


def _nic(sysfs: Path, name: str) -> LinkState:
    base = _base(sysfs, name)
    operstate = _read(base / "operstate")
    carrier = _read(base / "carrier")  # unreadable (EINVAL) while the interface is admin-down
    return LinkState(name=name, up=carrier == "1" and operstate in ("up", "unknown"))


def _ib_port(sysfs: Path, name: str) -> LinkState:
    base = _base(sysfs, name)
    state = _read(base / "state") or ""  # e.g. "4: ACTIVE"
    downed = _read(base / "counters" / "link_downed")
    extra = {"link_downed": int(downed)} if downed is not None and downed.isdigit() else {}
    return LinkState(name=name, up=state.endswith("ACTIVE"), **extra)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _children(path: Path) -> list[Path]:
    try:
        return list(path.iterdir())
    except OSError:
        return []
