"""A service's metrics endpoint answers on loopback unless told otherwise (--metrics-host,
TRAINMEDIC_METRICS_HOST)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from trainmedic.bus.metrics import serve_metrics
from trainmedic.common.metrics_flag import add_metrics_argument

LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp


def listening_on(port: int) -> set[str]:
    """The IPv4 addresses a socket listens on at `port`, read from the kernel's table."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        addr, at = local.split(":")
        if int(at, 16) == port and state == LISTEN:
            found.add(".".join(str(int(addr[i:i + 2], 16)) for i in (6, 4, 2, 0)))
    return found


def test_the_endpoint_binds_loopback_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINMEDIC_METRICS_HOST", raising=False)
    port = serve_metrics(0)
    assert port and listening_on(port) == {"127.0.0.1"}


def test_the_environment_or_the_caller_opens_it_wider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINMEDIC_METRICS_HOST", "0.0.0.0")
    port = serve_metrics(0)
    assert port and listening_on(port) == {"0.0.0.0"}
    port = serve_metrics(0, "127.0.0.2")
    assert port and listening_on(port) == {"127.0.0.2"}
    assert serve_metrics(None) is None


def test_the_flag_defaults_to_loopback_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    def parsed(*argv: str) -> argparse.Namespace:
        parser = argparse.ArgumentParser()
        add_metrics_argument(parser)
        return parser.parse_args(argv)

    monkeypatch.delenv("TRAINMEDIC_METRICS_HOST", raising=False)
    assert (parsed("--metrics-port", "9101").metrics_host, parsed().metrics_port) == ("127.0.0.1", None)
    assert parsed("--metrics-host", "0.0.0.0").metrics_host == "0.0.0.0"
    monkeypatch.setenv("TRAINMEDIC_METRICS_HOST", "10.0.0.5")
    assert parsed().metrics_host == "10.0.0.5"
