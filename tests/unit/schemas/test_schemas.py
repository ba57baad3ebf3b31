"""The event contract: what it accepts, keeps, rejects, and how it looks on the wire."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import trainmedic.schemas as s
from trainmedic.schemas.export import schemas as json_schemas
from trainmedic.schemas.topics import KINDS, misplaced

NODE = "node-a"
EXAMPLES: dict[str, list[s.Event]] = {
    "telemetry.gpu": [
        s.GpuSample(ts=10.0, node=NODE, gpu=3, uuid="GPU-1", util=97.5, mem_used_mb=70_000,
                    mem_total_mb=81_920, temp_c=71, power_w=650, ecc_sbe=2, ecc_dbe=0,
                    nvlink_errors=0, xids=[79], throttle=["hw_thermal"]),
    ],
    "telemetry.node": [
        s.NodeHeartbeat(ts=10.0, node=NODE, interval=1.0,
                        links=[s.LinkState(name="ib0", up=True), s.LinkState(name="eth0", up=False)]),
    ],
    "telemetry.worker": [
        s.WorkerStarted(ts=1, node=NODE, job="j", rank=0, world_size=8, generation=2, pid=41),
        s.WorkerStepped(ts=2, node=NODE, job="j", rank=1, world_size=8, step=5, step_time=0.05),
        s.WorkerFailed(ts=3, node=NODE, job="j", rank=2, world_size=8, error="RuntimeError: NCCL"),
        s.WorkerExited(ts=4, node=NODE, job="j", rank=3, world_size=8, exit_code=None, signal=9),
    ],
    "incidents": [
        s.Incident(ts=12.0, id="inc-1", status="open", category="gpu_lost", severity="SEV1",
                   action="reconfigure", job="j", node=NODE, ranks=[0, 1], first_ts=10.0,
                   evidence=["Xid 79 on gpu 3"]),
    ],
    "recovery": [
        s.RecoveryPlanned(ts=13.0, plan_id="p1", incident_id="inc-1", job="j", kind="reconfigure",
                          generation=4, nodes=["a", "c"], previous=["a", NODE], horizon_s=3600.0,
                          restore={"c": s.RestoreSource(kind="replica", node="a", rank=0)}),
        s.RecoveryCompleted(ts=14.0, plan_id="p1", job="j", generation=4),
        s.RecoveryFailed(ts=14.0, plan_id="p1", job="j", generation=4, reason="no ack", command_id="c1",
                         node="c", escalation="esc-1"),
        s.RecoverySkipped(ts=14.0, incident_id="inc-2", node=NODE, reason="no job runs on node-a"),
        s.Incident(ts=14.0, id="esc-1", status="open", category="restart_failed", severity="SEV2",
                   action="restart", job="j", first_ts=14.0),  # the coordinator's escalation
        s.NodeReadmitted(ts=15.0, node=NODE, incident_id="inc-1", reason="clean for 600 s"),
    ],
    "nodes": [
        s.NodeCordoned(ts=16.0, node=NODE, reason="bios update", by="ops"),
        s.NodeDrained(ts=17.0, node=NODE),
        s.NodeUncordoned(ts=18.0, node=NODE),
    ],
    "jobs": [
        s.JobSubmitted(ts=1.0, job=s.JobSpec(id="j", throughput={1: 1e15, 2: 1.9e15},
                                             nodes=["a", "b"], command=["python", "train.py"])),
    ],
    "commands": [
        s.Command(ts=5, node=NODE, id="c1", plan_id="p1", incident_id="inc-1", job="j",
                  generation=3, action="restart", signature="ab",
                  worker=s.WorkerSpec(submission="s1", rendezvous_key="ab" * 32,
                                      ranks=[0, 1], world_size=4, master_addr="10.0.0.1",
                                      master_port=29500, command=["python", "train.py"],
                                      checkpoint_dir="/ckpt",
                                      restore=s.RestoreSource(kind="replica", rank=2, node="b"))),
    ],
    "acks": [
        s.CommandAcked(ts=6, node=NODE, command_id="c1", job="j", generation=3, status="done",
                       elapsed_s=1.5),
    ],
    "dlq": [
        s.DeadLettered.of(ts=7, reason="bad", topic="t", partition=0, offset=9, key=b"k", value=b"\xff"),
    ],
}
ALL = [(suffix, event) for suffix, events in EXAMPLES.items() for event in events]


@pytest.mark.parametrize(("suffix", "event"), ALL, ids=lambda x: getattr(x, "type", x))
def test_every_event_round_trips_through_its_topic(suffix: str, event: s.Event) -> None:
    wire = s.encode(event)
    assert json.loads(wire)["type"] == event.type
    assert s.decode(wire, s.adapter(suffix)) == event


@pytest.mark.parametrize(("suffix", "event"), ALL, ids=lambda x: getattr(x, "type", x))
def test_every_other_topic_refuses_the_event_and_names_its_topic(suffix: str, event: s.Event) -> None:
    """Each topic has one writer: a coordinator's decision on incidents, a re-admission on nodes,
    an operator's cordon on recovery is invalid there, and the reason says where it belongs."""
    wire = s.encode(event)
    elsewhere = [spec.suffix for spec in s.SPECS if event.type not in KINDS[spec.suffix]]
    assert suffix not in elsewhere and elsewhere
    for other in elsewhere:
        with pytest.raises(s.InvalidEvent):
            s.decode(wire, s.adapter(other))
        assert misplaced(other, wire) == (f"a {event.type} belongs on the "
                                          f"{' or '.join(t for t in KINDS if event.type in KINDS[t])} "
                                          f"topic, never on {other}")
    assert misplaced(suffix, wire) is None


def test_only_the_recovery_topic_carries_the_coordinators_events() -> None:
    coordinator = {"recovery_planned", "recovery_completed", "recovery_failed", "recovery_skipped",
                   "node_readmitted", "job_ended"}
    assert {t for t, kinds in KINDS.items() if kinds & coordinator} == {"recovery"}
    assert KINDS["incidents"] == {"incident"}
    assert KINDS["nodes"] == {"node_cordoned", "node_drained", "node_uncordoned", "node_enrolled",
                              "node_removed"}
    assert s.Topics("acme.").recovery == "acme.recovery"


@pytest.mark.parametrize("value", [b"", b"\xff", b"[1]", b'{"type": 3}', b"[" * 100_000, None,
                                   b'{"type": "no_such_event"}'])
def test_a_value_of_no_known_kind_is_not_called_misplaced(value) -> None:
    assert misplaced("incidents", value) is None


def test_worker_topic_is_a_discriminated_union() -> None:
    raw = b'{"type":"worker_exit","ts":1,"node":"n","job":"j","rank":0,"world_size":1,"signal":9}'
    assert isinstance(s.decode(raw, s.adapter("telemetry.worker")), s.WorkerExited)


def test_unknown_fields_are_kept_not_rejected() -> None:
    raw = b'{"type":"gpu_sample","ts":1,"node":"n","gpu":0,"vendor_field":{"a":1}}'
    event = s.decode(raw, s.adapter("telemetry.gpu"))
    assert event.model_extra == {"vendor_field": {"a": 1}}
    assert json.loads(s.encode(event))["vendor_field"] == {"a": 1}


def test_defaults_of_the_contract() -> None:
    event = s.decode(b'{"type":"gpu_sample","ts":1,"node":"n","gpu":0}', s.adapter("telemetry.gpu"))
    assert (event.v, event.xids, event.throttle, event.util) == (1, (), (), None)
    beat = s.decode(b'{"type":"node_heartbeat","ts":1,"node":"n","interval":1}', s.adapter("telemetry.node"))
    assert beat.links == ()


@pytest.mark.parametrize(("raw", "reason"), [
    (b"", "Invalid JSON"),
    (b"\xff\xfe", "Invalid JSON"),
    (b"[1, 2]", "should be an object"),
    (b'{"type":"gpu_sample","node":"n","gpu":0}', "ts: Field required"),
    (b'{"type":"gpu_sample","ts":"soon","node":"n","gpu":0}', "ts: Input should be a valid number"),
    (b'{"type":"gpu_sample","ts":1,"node":"n","gpu":-1}', "gpu: Input should be greater than or equal to 0"),
    (b'{"type":"gpu_sample","ts":NaN,"node":"n","gpu":0}', "ts"),
    (b'{"type":"node_heartbeat","ts":1,"node":"n","interval":1}', "gpu_sample"),
])
def test_invalid_values_give_a_one_line_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(s.InvalidEvent) as caught:
        s.decode(raw, s.adapter("telemetry.gpu"))
    assert reason in str(caught.value)
    assert "\n" not in str(caught.value)


def test_null_value_is_invalid() -> None:
    with pytest.raises(s.InvalidEvent, match="null"):
        s.decode(None, s.adapter("telemetry.gpu"))


def test_events_are_frozen() -> None:
    event = EXAMPLES["telemetry.gpu"][0]
    with pytest.raises(ValueError):
        event.gpu = 4  # type: ignore[misc]  # the point: assignment must fail


def test_dead_letter_keeps_the_exact_bytes() -> None:
    letter = s.DeadLettered.of(ts=1, reason="r", topic="t", partition=1, offset=2, key=None,
                               value=b"\x00\xffabc")
    assert letter.raw_value() == b"\x00\xffabc"
    assert letter.value_text is None


def test_job_spec_rejects_what_cannot_run() -> None:
    with pytest.raises(ValueError, match="positive node count"):
        s.JobSpec(id="j", throughput={0: 1.0}, command=["x"])
    with pytest.raises(ValueError, match="twice"):
        s.JobSpec(id="j", throughput={1: 1.0}, nodes=["a", "a"], command=["x"])
    with pytest.raises(ValueError, match="names 3 nodes, but throughput lists only sizes 2, 4"):
        s.JobSpec(id="j", throughput={4: 2.0, 2: 1.0}, nodes=["a", "b", "c"], command=["x"])
    assert s.JobSpec(id="j", throughput={2: 1.0}, command=["x"]).master_port == 29500


def test_topic_names_carry_the_prefix() -> None:
    topics = s.Topics("acme.")
    assert topics.gpu == "acme.telemetry.gpu"
    assert topics.spec_of("acme.commands").key == "node"
    assert topics.spec_of("other.commands") is None
    assert set(topics.all()) >= {"acme.incidents", "acme.dlq", "acme.acks", "acme.alerts"}
    with pytest.raises(KeyError, match="known"):
        topics.name("nope")


def test_logs_that_are_replayed_keep_data_forever() -> None:
    forever = {spec.suffix for spec in s.SPECS if spec.retention_ms < 0}
    assert forever == {"incidents", "recovery", "commands", "acks", "jobs", "nodes"}


def test_json_schema_export_describes_each_topic(tmp_path) -> None:
    from trainmedic.schemas.export import export

    written = {p.name for p in export(tmp_path)}
    assert "telemetry.worker.schema.json" in written
    worker = json.loads((tmp_path / "telemetry.worker.schema.json").read_text())
    assert set(worker["discriminator"]["mapping"]) == {
        "worker_start", "worker_step", "worker_error", "worker_exit"}
    incidents = json_schemas()["incidents.schema.json"]
    assert incidents["properties"]["type"]["const"] == "incident" and incidents["properties"]["severity"]
    recovery = json_schemas()["recovery.schema.json"]
    assert set(recovery["discriminator"]["mapping"]) == {
        "incident", "recovery_planned", "recovery_completed", "recovery_failed", "recovery_skipped",
        "node_readmitted", "job_ended"}


finite = st.floats(min_value=0, max_value=4e9, allow_nan=False)
# Host names keep to letters, digits and `._-:`; ids are any text UTF-8 can hold without a NUL byte
# (a lone surrogate, which `characters()` gives unless told a codec, is no valid id: CI drew '\ud800').
hosts = st.text(alphabet="abcXYZ019._-:", min_size=1, max_size=20)
names = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=20)


@given(ts=finite, node=hosts, gpu=st.integers(0, 1024), util=st.none() | finite,
       dbe=st.none() | st.integers(0, 2**40), xids=st.lists(st.integers(0, 200), max_size=4),
       throttle=st.lists(st.text(max_size=12), max_size=3))
def test_any_valid_gpu_sample_round_trips(ts, node, gpu, util, dbe, xids, throttle) -> None:
    event = s.GpuSample(ts=ts, node=node, gpu=gpu, util=util, ecc_dbe=dbe, xids=xids, throttle=throttle)
    assert s.decode(s.encode(event), s.adapter("telemetry.gpu")) == event


@given(ts=finite, node=hosts, job=names, rank=st.integers(0, 10**5), step=st.integers(0, 10**9),
       step_time=st.floats(0, 1e4, allow_nan=False), error=st.text(max_size=200))
def test_any_valid_worker_event_round_trips(ts, node, job, rank, step, step_time, error) -> None:
    for event in (
        s.WorkerStepped(ts=ts, node=node, job=job, rank=rank, world_size=rank + 1, step=step,
                        step_time=step_time),
        s.WorkerFailed(ts=ts, node=node, job=job, rank=rank, world_size=rank + 1, error=error),
    ):
        assert s.decode(s.encode(event), s.adapter("telemetry.worker")) == event
