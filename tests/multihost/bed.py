"""A test bed of hosts on one machine: each host a network namespace with one veth link on a bridge,
its address in a /24 of 198.18.0.0/15 (RFC 2544's range for such tests; nothing else is ever
contacted), and the faults a network of real hosts has: a link down, drops in one direction or both
(nftables), a host's processes killed, a host's clock skewed (its Python processes' wall clock:
skewed/sitecustomize.py says why not libfaketime).

The machine itself (the test) is the operator's host: the bridge holds the subnet's first address, so
the test reaches every host and every host reaches it. Processes enter a host with
`nsenter --net=/run/netns/NAME`, not `ip netns exec`, which remounts /sys and hides the cgroups an
executor needs. Every name carries the pytest process's pid: `sweep` removes what an earlier run
that died left behind, `close` what this one made, whatever state a test left.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

RANGE = ipaddress.ip_network("198.18.0.0/15")
PREFIX = "tmbed"  # namespaces: tmbed<pid>-<host>; bridge tmb<pid>; veths tmv<pid>x<i>
TABLE = "trainmedic_bed"  # the nftables table a host's drop rules live in
NEEDS = ("ip", "nsenter", "nft")
SKEWED = Path(__file__).parent / "skewed"  # a sitecustomize that skews Python's wall clock


class BedError(RuntimeError):
    """The bed could not be built or changed."""


def sh(*argv: str, check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise BedError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done


@dataclass
class Host:
    name: str
    netns: str
    address: str
    veth: str  # the link's end on the bridge, in the machine's own namespace
    skew_s: float = 0.0  # processes started here from now on see a clock this far ahead
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def enter(self) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.netns}", "--"]


class Bed:
    """Hosts on one bridge. `add` builds one, `spawn` runs a process in it, the fault verbs break it."""

    def __init__(self, root: Path, owner: int | None = None):
        self.owner = owner or os.getpid()
        self.root = root
        self.bridge = f"tmb{self.owner}"
        self.net = free_subnet()
        self.gateway = str(self.net.network_address + 1)  # the machine's (the operator's) address
        self.hosts: dict[str, Host] = {}
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.gateway}/{self.net.prefixlen}", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")

    def add(self, name: str) -> Host:
        """A new host, its link up, reachable from every other host and from the machine."""
        index = len(self.hosts) + 1
        host = Host(name, f"{PREFIX}{self.owner}-{name}", str(self.net.network_address + 10 + index),
                    f"tmv{self.owner}x{index}")
        self.hosts[name] = host
        sh("ip", "netns", "add", host.netns)
        sh("ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.netns)
        sh("ip", "link", "set", host.veth, "master", self.bridge, "up")
        sh("ip", "-n", host.netns, "addr", "add", f"{host.address}/{self.net.prefixlen}", "dev", "eth0")
        for link in ("lo", "eth0"):
            sh("ip", "-n", host.netns, "link", "set", link, "up")
        sh(*host.enter, "nft", "add", "table", "inet", TABLE)
        for chain in ("input", "output"):
            sh(*host.enter, "nft", "add", "chain", "inet", TABLE, chain,
               f"{{ type filter hook {chain} priority 0; policy accept; }}")
        return host

    # -- processes ---------------------------------------------------------------------------

    def spawn(self, name: str, argv: list[str], env: dict[str, str], log: str) -> subprocess.Popen:
        """`argv` started in host `name` (Python under its skewed clock, if any), its output in LOG.log."""
        host = self.hosts[name]
        if host.skew_s:  # skewed/sitecustomize.py
            env = {**env, "TRAINMEDIC_BED_SKEW_S": str(host.skew_s),
                   "PYTHONPATH": os.pathsep.join(filter(None, (str(SKEWED), env.get("PYTHONPATH"))))}
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        with open(self.root / "logs" / f"{log}.log", "ab") as out:
            proc = subprocess.Popen([*host.enter, *argv], env=env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        host.procs.append(proc)
        return proc

    def run(self, name: str, argv: list[str], env: dict[str, str], timeout: float = 120.0
            ) -> subprocess.CompletedProcess:
        """`argv` run to its end in host `name`."""
        return subprocess.run([*self.hosts[name].enter, *argv], env=env, capture_output=True, text=True,
                              timeout=timeout)

    def log(self, log: str) -> str:
        path = self.root / "logs" / f"{log}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill(self, name: str) -> int:
        """kill -9 of every process in host `name` (its ranks too); how many there were."""
        pids = netns_pids(self.hosts[name].netns)
        for pid in pids:
            _signal(pid, signal.SIGKILL)
        for proc in self.hosts[name].procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        return len(pids)

    def skew(self, name: str, seconds: float) -> None:
        """Processes started in host `name` from now on read a clock `seconds` ahead (behind if < 0)."""
        self.hosts[name].skew_s = seconds

    # -- the network's faults ----------------------------------------------------------------

    def link(self, name: str, up: bool) -> None:
        """Host `name`'s only link down (a partition from everything) or up again."""
        sh("ip", "-n", self.hosts[name].netns, "link", "set", "eth0", "up" if up else "down")

    def drop(self, name: str, peers: list[str], *, inbound: bool = True, outbound: bool = True) -> None:
        """Host `name` drops what it sends to (`outbound`) and what it gets from (`inbound`) `peers`:
        both, a partition between them; one, a one-way partition."""
        host = self.hosts[name]
        for peer in peers:
            address = self.hosts[peer].address if peer in self.hosts else peer
            if outbound:
                sh(*host.enter, "nft", "add", "rule", "inet", TABLE, "output", "ip", "daddr", address, "drop")
            if inbound:
                sh(*host.enter, "nft", "add", "rule", "inet", TABLE, "input", "ip", "saddr", address, "drop")

    def heal(self, name: str) -> None:
        """Host `name`'s link up and its drop rules gone."""
        self.link(name, up=True)
        for chain in ("input", "output"):
            sh(*self.hosts[name].enter, "nft", "flush", "chain", "inet", TABLE, chain)

    # -- the end -----------------------------------------------------------------------------

    def close(self) -> None:
        """Every process of every host killed, every namespace and link removed."""
        for name in list(self.hosts):
            self.kill(name)
        remove(self.owner)


def netns_pids(netns: str) -> list[int]:
    done = sh("ip", "netns", "pids", netns, check=False)
    return [int(p) for p in done.stdout.split() if p.isdigit()]


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 of RANGE that no link of this machine has an address in."""
    links = json.loads(sh("ip", "-j", "addr").stdout)
    taken = {ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}").network
             for link in links for a in link.get("addr_info", []) if a.get("family") == "inet"}
    for net in RANGE.subnets(new_prefix=24):
        if not any(net.overlaps(t) for t in taken):
            return net
    raise BedError(f"every /24 of {RANGE} is in use on this machine")


def remove(owner: int) -> None:
    """Kill the processes in, and delete, the namespaces and links of the bed of pytest pid `owner`."""
    for netns in sh("ip", "netns", "list").stdout.split():
        if netns.startswith(f"{PREFIX}{owner}-"):
            for _ in range(3):  # a process forking while it is killed: once more
                for pid in netns_pids(netns):
                    _signal(pid, signal.SIGKILL)
                time.sleep(0.1)
            sh("ip", "netns", "del", netns, check=False)
    for link in json.loads(sh("ip", "-j", "link").stdout):
        name = link["ifname"]
        if name == f"tmb{owner}" or name.startswith(f"tmv{owner}x"):
            sh("ip", "link", "del", name, check=False)


def sweep() -> list[int]:
    """Remove the beds of pytest processes that are gone (killed before they could clean up)."""
    owners = set()
    for netns in sh("ip", "netns", "list").stdout.split():
        if netns.startswith(PREFIX) and "-" in netns:
            owners.add(netns[len(PREFIX):].split("-")[0])
    for link in json.loads(sh("ip", "-j", "link").stdout):
        name = link["ifname"]
        if name.startswith("tmb") and name[3:].isdigit():
            owners.add(name[3:])
    gone = [int(o) for o in owners if o.isdigit() and not Path(f"/proc/{o}").exists()]
    for owner in gone:
        remove(owner)
    return gone
