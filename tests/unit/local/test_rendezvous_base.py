"""The jobs this machine's tools submit (the demo, `trainmedic run`) listen below the kernel's ephemeral
range: a generation's port in it could be a Kafka client connection's own, and rank 0's listen failed
(the generation lost, its node blamed for it)."""

from __future__ import annotations

from pathlib import Path

from trainmedic.local.cluster import EPHEMERAL, RENDEZVOUS_FLOOR, rendezvous_base
from trainmedic.recovery.coordinator.core.rendezvous import PORTS


def test_every_generation_port_is_below_the_ephemeral_range(tmp_path: Path) -> None:
    ranges = tmp_path / "ip_local_port_range"
    for low in (32768, 40000, 25000):
        ranges.write_text(f"{low}\t60999\n")
        bases = {rendezvous_base(ranges) for _ in range(200)}
        assert all(base >= RENDEZVOUS_FLOOR and base + PORTS <= low for base in bases), (low, sorted(bases))


def test_this_machines_range_is_read_and_a_missing_file_falls_back_to_linuxs_default(tmp_path: Path) -> None:
    low = int(EPHEMERAL.read_text().split()[0])
    assert rendezvous_base() + PORTS <= low
    assert rendezvous_base(tmp_path / "missing") + PORTS <= 32768
