"""The bed itself: hosts reach each other and the machine; each fault verb breaks what it says and no
more; clocks skew per host; nothing is left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.multihost.bed import PREFIX, Bed, netns_pids, remove, sh, sweep

pytestmark = pytest.mark.multihost

# Listens on UDP and TCP port 7000 for 6 s; prints each datagram it gets.
LISTEN = """
import socket, select, time
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind(("0.0.0.0", 7000))
tcp = socket.socket(); tcp.bind(("0.0.0.0", 7000)); tcp.listen()
end = time.monotonic() + 6
while time.monotonic() < end:
    ready, _, _ = select.select([udp, tcp], [], [], 0.1)
    for s in ready:
        if s is udp: print("got", s.recv(100).decode(), flush=True)
        else: s.accept()[0].close()
"""
SEND = ("import socket, sys; "
        "socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'hello', (sys.argv[1], 7000))")
CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], 7000), timeout=1).close(); print("connected")
except OSError as err:
    print("refused", err)
"""


def listening(bed: Bed, host: str, log: str) -> subprocess.Popen:
    proc = bed.spawn(host, [sys.executable, "-c", LISTEN], dict(os.environ), log)
    time.sleep(0.8)
    return proc


def reaches(bed: Bed, src: str, dst: str) -> bool:
    done = bed.run(src, [sys.executable, "-c", CONNECT, bed.hosts[dst].address], dict(os.environ), timeout=10)
    return done.stdout.startswith("connected")


def test_hosts_reach_each_other_and_a_partition_cuts_a_host_off_until_healed(bed: Bed) -> None:
    for name in ("a", "b", "c"):
        bed.add(name)
    assert len({h.address for h in bed.hosts.values()}) == 3
    assert all(h.address.startswith("198.1") for h in bed.hosts.values())
    listening(bed, "b", "b")
    listening(bed, "c", "c")
    assert reaches(bed, "a", "b") and reaches(bed, "a", "c")
    bed.link("b", up=False)
    assert not reaches(bed, "a", "b") and reaches(bed, "a", "c")  # the rest of the network goes on
    bed.heal("b")
    assert reaches(bed, "a", "b")


def test_drop_cuts_one_pair_of_hosts_and_a_one_way_drop_one_direction(bed: Bed) -> None:
    for name in ("a", "b", "c"):
        bed.add(name)
    for name in ("a", "b", "c"):
        listening(bed, name, name)
    bed.drop("a", ["b"])
    assert not reaches(bed, "a", "b") and not reaches(bed, "b", "a")
    assert reaches(bed, "a", "c") and reaches(bed, "b", "c")
    bed.heal("a")
    assert reaches(bed, "a", "b")
    bed.drop("a", ["b"], inbound=False)  # a's datagrams to b are lost; b's to a arrive
    for src, dst in (("a", "b"), ("b", "a")):
        bed.run(src, [sys.executable, "-c", SEND, bed.hosts[dst].address], dict(os.environ))
    time.sleep(6)
    assert "got hello" in bed.log("a") and "got hello" not in bed.log("b")


def test_the_machine_is_the_operators_host_and_reaches_every_host(bed: Bed) -> None:
    bed.add("a")
    listening(bed, "a", "a")
    subprocess.run([sys.executable, "-c", CONNECT, bed.hosts["a"].address], check=True)
    done = bed.run("a", [sys.executable, "-c", CONNECT, bed.gateway], dict(os.environ))
    assert "refused" in done.stdout and "timed out" not in done.stdout  # reached: nothing listens there


def test_a_skewed_host_reads_a_clock_ahead_and_the_others_do_not(bed: Bed) -> None:
    bed.add("a")
    bed.add("b")
    bed.skew("a", 120)
    clock = [sys.executable, "-c", "import time; print(time.time())"]
    for name in ("a", "b"):
        bed.spawn(name, clock, dict(os.environ), name).wait(30)
    now = time.time()
    assert float(bed.log("a")) - now > 100
    assert abs(float(bed.log("b")) - now) < 10


def test_kill_ends_every_process_of_a_host_children_too(bed: Bed) -> None:
    bed.add("a")
    bed.add("b")
    forks = "import os, time\nif os.fork() == 0: os.setsid()\ntime.sleep(60)"  # a child in its own session
    bed.spawn("a", [sys.executable, "-c", forks], dict(os.environ), "a")
    other = bed.spawn("b", [sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ), "b")
    time.sleep(1)
    assert len(netns_pids(bed.hosts["a"].netns)) == 2
    assert bed.kill("a") == 2
    assert netns_pids(bed.hosts["a"].netns) == [] and other.poll() is None


def test_close_and_sweep_leave_no_namespace_link_or_process(bed_allowed: None, tmp_path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid no process has: the owner of a bed whose run was killed
    left = Bed(tmp_path / "left", owner=dead.pid)
    left.add("a")
    left.spawn("a", [sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ), "a")
    mine = Bed(tmp_path / "mine")
    mine.add("a")
    try:
        assert dead.pid in sweep()
        assert not any(n.startswith(f"{PREFIX}{dead.pid}-") for n in sh("ip", "netns", "list").stdout.split())
        assert left.hosts["a"].procs[0].wait(10) == -9
        assert mine.hosts["a"].netns in sh("ip", "netns", "list").stdout  # a live run's bed stays
    finally:
        mine.close()
        remove(dead.pid)
    listed = sh("ip", "netns", "list").stdout + sh("ip", "link").stdout
    assert f"{PREFIX}{os.getpid()}-" not in listed and f"tmb{os.getpid()}" not in listed
