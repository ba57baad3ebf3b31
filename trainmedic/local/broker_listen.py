"""Where the local broker listens, the address it gives clients, and whether its listeners are TLS;
the state a running broker leaves behind (docs/security.md, "Broker authentication and ACLs").

Off loopback every listener is TLS: a plain one there is refused unless asked for by name
(`plaintext`). Pure: values in, values out.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmedic.bus.addresses import host_port, is_loopback, is_wildcard, split_host_port
from trainmedic.common.errors import ConfigError

DEFAULT_PORT = 9092
LOOPBACK = "127.0.0.1"

PLAINTEXT_OFF_LOOPBACK = (
    "INSECURE: the broker listens on {where} without TLS (--plaintext): every record and SASL exchange, "
    "the controller listener's PLAIN password among them, crosses the network in the clear, readable and "
    "alterable by anyone on the path")


def voter_host(host: str, advertise_host: str) -> str:
    """The address the broker reaches its own controller at: the listen address, or the advertised
    host when it listens on every address."""
    return advertise_host if is_wildcard(host) else host


@dataclass(frozen=True)
class Listener:
    """The client listener's address (`host`, `port`; the controller's is `controller_port`, by default
    the next port, on the same host), the address clients are told (`advertise_*`, by default the
    listen address), and TLS. Validated when built: raises ConfigError."""

    host: str = LOOPBACK
    port: int = DEFAULT_PORT
    controller_port: int = 0
    advertise_host: str = ""
    advertise_port: int = 0
    tls: bool = False
    plaintext: bool = False  # a plain listener off loopback, asked for by name (--plaintext)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "controller_port", self.controller_port or self.port + 1)
        if not self.advertise_host and is_wildcard(self.host):
            raise ConfigError(f"the broker listens on every address ({self.host}): give --advertise "
                              "HOST:PORT, the address other hosts reach it at")
        set_(self, "advertise_host", self.advertise_host or self.host)
        set_(self, "advertise_port", self.advertise_port or self.port)
        for port in (self.port, self.controller_port, self.advertise_port):
            if not 1 <= port < 65536:
                raise ConfigError(f"port {port}: give ports from 1 to 65535 (the controller's is the next)")
        if is_wildcard(self.advertise_host):
            raise ConfigError(f"--advertise {self.advertise_host}: clients cannot connect to a wildcard "
                              "address; give this host's name or address")
        if self.tls and self.plaintext:
            raise ConfigError("--plaintext and TLS exclude each other: give one")
        if not self.tls and not self.loopback and not self.plaintext:
            raise ConfigError(
                f"a plain (non-TLS) listener on {host_port(self.host, self.port)} would send every record "
                "in the clear to other hosts: off loopback the broker runs TLS (not with --insecure, which "
                "has no authentication and so no TLS); ask for plain by name with --plaintext")

    @property
    def loopback(self) -> bool:
        """Only this machine can reach the broker (it listens and advertises on loopback)."""
        return is_loopback(self.host) and is_loopback(self.advertise_host)

    @property
    def bootstrap(self) -> str:
        """The address clients connect to: the advertised one."""
        return host_port(self.advertise_host, self.advertise_port)

    @property
    def listen(self) -> str:
        return host_port(self.host, self.port)

    @property
    def controller(self) -> str:
        return host_port(self.host, self.controller_port)

    @property
    def voter(self) -> str:
        """controller.quorum.voters' address of the one node."""
        return host_port(voter_host(self.host, self.advertise_host), self.controller_port)

    @property
    def reach_host(self) -> str:
        """The address this machine checks the listener at (a wildcard's own loopback)."""
        if is_wildcard(self.host):
            return "::1" if ":" in self.host else LOOPBACK
        return self.host

    @property
    def names(self) -> tuple[str, ...]:
        """The names the broker's certificate must carry: the advertised host, the listen address
        (unless a wildcard) and the controller's address, each once."""
        wanted = (self.advertise_host, voter_host(self.host, self.advertise_host),
                  *(() if is_wildcard(self.host) else (self.host,)))
        return tuple(dict.fromkeys(wanted))

    def protocol(self, secure: bool) -> str:
        """The client listener's security protocol (also its listener name)."""
        if not secure:
            return "PLAINTEXT"
        return "SASL_SSL" if self.tls else "SASL_PLAINTEXT"


def listener_from(port: int, listen: str | None = None, advertise: str | None = None, *,
                  tls: bool = False, plaintext: bool = False, insecure: bool = False) -> Listener:
    """The listener the command line asks for: `--port` alone is loopback (plain unless `tls`);
    `--listen ADDR:PORT` off loopback is TLS unless `plaintext`; `insecure` (no authentication) is
    never TLS, so off loopback it needs `plaintext` too."""
    if insecure and tls:
        raise ConfigError("--insecure runs without authentication, and so without TLS: not with --tls "
                          "or --tls-ca/--tls-cert/--tls-key")
    if listen is None:
        if advertise is not None:
            raise ConfigError("--advertise needs --listen (a loopback broker is this machine's only)")
        return Listener(port=port, tls=tls, plaintext=plaintext)
    host, listen_port = split_host_port(listen, "--listen")
    adv_host, adv_port = split_host_port(advertise, "--advertise") if advertise else ("", 0)
    loopback = is_loopback(host) and (not adv_host or is_loopback(adv_host))
    on = tls or not (insecure or plaintext or loopback)
    return Listener(host=host, port=listen_port, advertise_host=adv_host, advertise_port=adv_port, tls=on,
                    plaintext=plaintext)


@dataclass(frozen=True)
class BrokerState:
    """What a running broker left behind: enough to find it, check it and stop it. A state file
    written before brokers were secure is a plain broker's; one written before --listen, loopback's."""

    pid: int
    port: int
    controller_port: int
    secure: bool = False
    host: str = LOOPBACK
    advertise: str = ""  # HOST:PORT, "" for the listen address
    tls: bool = False
    node_id: int = 1
    members: int = 1  # a cluster's member count (1: a single broker)

    @property
    def bootstrap(self) -> str:
        return self.advertise or host_port(self.host, self.port)

    def same_place(self, listener: Listener) -> bool:
        """Whether this broker is the one `listener` asks for: the same listen host, advertised host and
        TLS, ports aside; a plain loopback listener (`start` without --listen or --tls: no address in
        particular) asks for the running broker wherever it listens, as before --listen."""
        if listener == Listener(port=listener.port, controller_port=listener.controller_port):
            return True
        return (self.host, split_host_port(self.bootstrap)[0], self.tls) == (
            listener.host, listener.advertise_host, listener.tls)
