"""The local broker's own protection as configured: connection caps in server.properties (below the
open-file limit), and quotas that bound telemetry writers and never the control roles' or benches'
rates."""

from __future__ import annotations

from pathlib import Path

from trainmedic.local.broker_auth import complete
from trainmedic.local.broker_config import server_properties
from trainmedic.local.broker_limits import DEFAULT, QUOTAS, TELEMETRY, Connections, MiB, parse_described
from trainmedic.schemas import encode
from trainmedic.schemas.telemetry import GpuSample, WorkerStepped


def props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith(" "))


def test_connections_are_capped_per_address_and_in_all_on_both_kinds_of_broker(tmp_path: Path) -> None:
    caps = Connections.for_files(20_000)
    secure = props(server_properties(tmp_path / "d", 19092, 19093, complete({}), caps))
    assert secure["max.connections.per.ip"] == "1000" and secure["max.connections"] == "4000"
    assert secure["listener.name.sasl_plaintext.max.connections"] == "4000"  # the inter-broker listener too
    assert secure["connection.failed.authentication.delay.ms"] == "1000"
    plain = props(server_properties(tmp_path / "d", 19092, 19093))
    assert plain["listener.name.plaintext.max.connections"] == "4000"
    assert plain["max.connections.per.ip"] == "1000"


def test_the_caps_leave_the_broker_most_of_its_open_files() -> None:
    assert Connections.for_files(1024) == Connections(per_ip=256, total=256)
    assert Connections.for_files(1 << 20) == Connections(per_ip=1000, total=4000)
    assert Connections.for_files(100).total == 64


def test_telemetry_writers_are_bounded_above_a_large_clusters_rate_control_roles_far_above_benches() -> None:
    assert {user for user, quota in QUOTAS.items() if quota == TELEMETRY} == {"agent", "executor"}
    assert QUOTAS[None] == DEFAULT  # detector, coordinator, operator, ops, admin
    gpus = 16_384  # at 1 Hz: a GPU sample each and a rank step each, a heartbeat per 8 GPUs
    sample = len(encode(GpuSample(ts=1.7e9, node="node-00001", gpu=7, uuid="GPU-" + "f" * 36, util=93.8,
                                  mem_used_mb=60201.4, mem_total_mb=81559.0, temp_c=60.6, power_w=546.8,
                                  ecc_sbe=0, ecc_dbe=0, nvlink_errors=0)))
    step = len(encode(WorkerStepped(ts=1.7e9, node="node-00001", job="llm-pretrain", rank=16_000,
                                    world_size=gpus, generation=3, step=123_456, step_time=1.234)))
    assert TELEMETRY.producer_byte_rate > 4 * gpus * 1.25 * max(sample, step)  # 4x, with keys and headers
    assert DEFAULT.producer_byte_rate > 4 * 150_000 * sample  # the live detector bench's top rate, as admin
    assert TELEMETRY.producer_byte_rate <= 32 * MiB  # a gigabyte takes half a minute, not two seconds


def test_the_quotas_as_kafka_describes_them() -> None:
    text = "\n".join([
        "[2026-12-04 15:37:28,736] INFO Registered kafka:type=kafka.Log4jController MBean",
        "Quota configs for the default user-principal are consumer_byte_rate=5.36870912E8, "
        "producer_byte_rate=2.68435456E8",
        "Quota configs for user-principal 'agent' are consumer_byte_rate=6.7108864E7, "
        "producer_byte_rate=3.3554432E7",
        "SCRAM credential configs for user-principal 'agent' are SCRAM-SHA-512=iterations=8192"])
    assert parse_described(text) == {
        None: {"consumer_byte_rate": 512 * MiB, "producer_byte_rate": 256 * MiB},
        "agent": {"consumer_byte_rate": 64 * MiB, "producer_byte_rate": 32 * MiB}}
