"""The contract's bounds: finite times and numbers, safe names, no NUL byte for a process.

Sane values still pass."""

from __future__ import annotations

import json

import pytest

import trainmedic.schemas as s

INCIDENT = {"type": "incident", "ts": 1.7e9, "id": "i1", "status": "open", "category": "gpu_lost",
            "severity": "SEV1", "action": "reconfigure", "node": "n1", "first_ts": 1.7e9 - 1}
JOB = {"type": "job_submitted", "ts": 1.7e9,
       "job": {"id": "llm", "throughput": {"2": 1e14}, "nodes": ["a", "b"],
               "command": ["python", "-m", "train"]}}


def invalid(suffix: str, value: dict | bytes) -> str:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    with pytest.raises(s.InvalidEvent) as caught:
        s.decode(raw, s.adapter(suffix))
    return str(caught.value)


@pytest.mark.parametrize("first_ts", ["-Infinity", "Infinity", "NaN", "1e300", "-1"])
def test_an_incident_time_is_a_finite_date(first_ts: str) -> None:
    raw = json.dumps(INCIDENT).replace('"first_ts": 1699999999.0', f'"first_ts": {first_ts}').encode()
    assert first_ts in raw.decode()
    assert "first_ts" in invalid("incidents", raw)
    assert "ts" in invalid("incidents", {**INCIDENT, "ts": 1e300})


def test_a_throughput_or_weight_is_finite_and_not_negative() -> None:
    raw = json.dumps(JOB).replace('"2": 100000000000000.0', '"2": NaN').encode()
    assert "NaN" in raw.decode() and "throughput" in invalid("jobs", raw)
    assert "throughput" in invalid("jobs", {**JOB, "job": {**JOB["job"], "throughput": {"2": 1e300}}})
    assert "weight" in invalid("jobs", {**JOB, "job": {**JOB["job"], "weight": 1e300}})


@pytest.mark.parametrize("where", ["command", "checkpoint_dir", "id"])
def test_text_for_a_process_has_no_nul_byte(where: str) -> None:
    value = ["python", "tr\x00ain"] if where == "command" else "a\x00b"
    assert "NUL" in invalid("jobs", {**JOB, "job": {**JOB["job"], where: value}})


@pytest.mark.parametrize("node", ["", "n 1", "n/1", "n\x001", "é", "x" * 254, ";rm"])
def test_a_node_or_nic_name_is_safe(node: str) -> None:
    assert "node" in invalid("incidents", {**INCIDENT, "node": node})
    beat = {"type": "node_heartbeat", "ts": 1.7e9, "node": "n1", "interval": 1.0,
            "links": [{"name": node, "up": True}]}
    assert "links" in invalid("telemetry.node", beat)


def test_sane_values_still_validate() -> None:
    for node in ("n01", "node-1.rack2.example.com", "10.0.0.7", "fe80::1", "mlx5_0", "x" * 253):
        s.decode(json.dumps({**INCIDENT, "node": node}), s.adapter("incidents"))
    s.decode(json.dumps({**INCIDENT, "ts": 0, "first_ts": 0}), s.adapter("incidents"))
    wide = {**INCIDENT, "ts": 4102444800.0, "evidence": ["é ü 日本 " * 100]}
    s.decode(json.dumps(wide), s.adapter("incidents"))
    s.decode(json.dumps({**JOB, "job": {**JOB["job"], "throughput": {"2": 0}, "weight": 100.0,
                                         "command": ["nice", "-n", "5", "python", "-m", "train"]}}),
             s.adapter("jobs"))


def test_lists_and_strings_are_capped() -> None:
    assert "ranks" in invalid("incidents", {**INCIDENT, "ranks": list(range((1 << 20) + 1))})
    assert "id" in invalid("incidents", {**INCIDENT, "id": "x" * 2000})
    assert "ts" in invalid("incidents", {**INCIDENT, "ts": [[[[1]]]]})
