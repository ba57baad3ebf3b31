"""The one reader and writer of `HOST:PORT` addresses (IPv6 hosts in brackets: `[::1]:9092`), and
which hosts are loopback (127.0.0.0/8, ::1, localhost) or a wildcard (0.0.0.0, ::). Pure.
"""

from __future__ import annotations

import ipaddress

from trainmedic.common.errors import ConfigError

__all__ = ["all_loopback", "host_port", "ip_of", "is_loopback", "is_wildcard", "split_host_port"]


def split_host_port(text: str, what: str = "address") -> tuple[str, int]:
    """`HOST:PORT` (`[V6]:PORT`) as (host, port); raises ConfigError naming `what`."""
    host, sep, port = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 1 <= int(port) < 65536:
        raise ConfigError(f"{what} {text!r} is not HOST:PORT (a port from 1 to 65535; an IPv6 host in "
                          "brackets, [::1]:9092)")
    return host, int(port)


def host_port(host: str, port: int) -> str:
    """`host:port`, an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def ip_of(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """`host` as an IP address, or None for a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    """Only this machine reaches `host`: 127.0.0.0/8, ::1 or the name localhost."""
    ip = ip_of(host)
    return ip.is_loopback if ip is not None else host.lower().rstrip(".") == "localhost"


def is_wildcard(host: str) -> bool:
    """`host` means every address of this machine (0.0.0.0, ::)."""
    ip = ip_of(host)
    return ip is not None and ip.is_unspecified


def all_loopback(bootstrap: str) -> bool:
    """Every address of a comma-separated bootstrap list is loopback."""
    hosts = [split_host_port(one, "bootstrap address")[0] for one in bootstrap.split(",") if one.strip()]
    return bool(hosts) and all(is_loopback(host) for host in hosts)
