"""The node's data plane: the NIC and address its ranks talk to each other over, named by the executor's
`data_interface` and/or `data_address` and checked against this host's NICs (docs/executor.md, "The
data plane")."""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainmedic.common.errors import ConfigError

__all__ = ["IFNAME_VARIABLES", "DataPlane", "host_addresses", "resolve"]

# The variables naming the NIC the collectives bind to: gloo's (CPU ranks) and NCCL's bootstrap (GPU).
IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
SIOCGIFADDR = 0x8915  # linux/sockios.h: a NIC's (primary) IPv4 address
IF_INET6 = Path("/proc/net/if_inet6")  # every IPv6 address, with its NIC


@dataclass(frozen=True, slots=True)
class DataPlane:
    """The NIC this node's ranks use, and the address they know this node by (None: the NIC holds
    none this executor can read)."""

    interface: str
    address: str | None

    def rank_env(self) -> dict[str, str]:
        """What every rank of this node gets, unless its job's env says otherwise."""
        return dict.fromkeys(IFNAME_VARIABLES, self.interface)


def host_addresses() -> dict[str, tuple[str, ...]]:
    """Each NIC of this host (socket.if_nameindex) with the addresses it holds: its primary IPv4
    address (ioctl SIOCGIFADDR; a secondary one is not seen) and its IPv6 ones (/proc/net/if_inet6)."""
    found: dict[str, list[str]] = {name: [] for _, name in socket.if_nameindex()}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for name, addresses in found.items():
            try:
                answer = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:  # the NIC holds no IPv4 address
                continue
            addresses.append(socket.inet_ntoa(answer[20:24]))  # struct ifreq: name[16], sockaddr_in
    try:
        lines = IF_INET6.read_text().splitlines()
    except OSError:  # IPv6 is off
        lines = []
    for line in lines:
        fields = line.split()
        if len(fields) == 6 and fields[5] in found:
            found[fields[5]].append(str(ipaddress.IPv6Address(bytes.fromhex(fields[0]))))
    return {name: tuple(addresses) for name, addresses in found.items()}


def resolve(interface: str | None, address: str | None,
            nics: Mapping[str, tuple[str, ...]] | None = None) -> DataPlane | None:
    """The data plane `interface` and `address` name, checked against `nics` (NIC -> addresses;
    default this host's): the NIC that holds `address`, the address of `interface` (its first IPv4
    one, else its first IPv6 one). None when neither is given. A ConfigError, listing the NICs and
    their addresses, when `interface` is no NIC here or `address` is no IP, is held by no NIC or
    not by `interface`."""
    if interface is None and address is None:
        return None
    nics = host_addresses() if nics is None else nics
    listing = "; ".join(f"{name}: {', '.join(held) or 'no address'}" for name, held in nics.items())
    if address is None:
        if interface not in nics:
            raise ConfigError(f"data_interface {interface!r} is no NIC of this host (its NICs: {listing})")
        held = sorted(nics[interface], key=lambda a: ipaddress.ip_address(a).version)
        return DataPlane(interface, held[0] if held else None)
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        raise ConfigError(f"data_address {address!r} is not an IP address") from None
    holders = [name for name, held in nics.items() if ip in {ipaddress.ip_address(a) for a in held}]
    if not holders:
        raise ConfigError(f"data_address {ip} is held by no NIC of this host (its NICs: {listing}): "
                          "give one of those addresses, or data_interface alone")
    if interface is not None and interface not in holders:
        raise ConfigError(f"data_address {ip} is held by {', '.join(holders)}, not by data_interface "
                          f"{interface!r}: give the NIC that holds it, or one of the two alone")
    return DataPlane(interface or holders[0], str(ip))
