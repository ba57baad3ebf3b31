"""Issue 12: no record stops the coordinator; bad ones are refused with a reason, the rest go on.

Records enter as bytes through the same validation and the same `rebuild`/`receive` the
service uses.
"""

from __future__ import annotations

import json

from tests.unit.coordinator.world import CONFIG, Recorder, incident, of_type, submitted
from trainmedic.bus.message import Record, parse_message
from trainmedic.recovery.coordinator.core import ClusterState, estimate_mtbf
from trainmedic.recovery.coordinator.intake import rebuild, receive
from trainmedic.schemas import DeadLettered, Topics, encode

TOPICS = Topics("t.")


def read(topic: str, value: bytes, offset: int = 0) -> Record | DeadLettered:
    return parse_message(TOPICS, topic, 0, offset, b"k", value, now=0.0)


def test_a_plan_the_fold_cannot_apply_is_refused_live_and_on_every_rebuild() -> None:
    rec = Recorder()
    rec.started(now=1.0)
    plan = rec.state.jobs["llm"].plan
    rival = read(TOPICS.recovery, encode(plan.model_copy(update={"plan_id": "another-start", "ts": 9.0})))
    assert isinstance(rival, Record)
    answer = receive(rec.state, rival, now=10.0)
    assert isinstance(answer, str) and "IllegalTransition" in answer and "running to starting" in answer
    assert ("another-start", "llm") not in rec.state.plans  # refused whole: nothing of it folded
    out = receive(rec.state, read(TOPICS.incidents, encode(incident("i1", "SEV2", node="n2"))), now=50.0)
    assert of_type(out, "recovery_planned")  # the coordinator goes on

    log = [read(TOPICS.name(topic), encode(e)) for (topic, _), e in rec.placed()
           if e.type in ("job_submitted", "recovery_planned", "recovery_completed")]
    state = ClusterState.initial(CONFIG)
    refused = rebuild(state, [*log[:3], rival, *log[3:]])
    assert [r for r, _ in refused] == [rival]
    clean = ClusterState.initial(CONFIG)
    assert rebuild(clean, log) == [] and clean == state


def test_an_incident_with_an_infinite_first_ts_is_dead_lettered_and_sev1_plans_still_validate() -> None:
    rec = Recorder()
    rec.started(now=1.0)
    bad = json.loads(encode(incident("i0", "SEV2", node="n2")))
    raw = json.dumps(bad).replace(f'"first_ts": {bad["first_ts"]}', '"first_ts": -Infinity').encode()
    assert b"-Infinity" in raw
    assert isinstance(read(TOPICS.incidents, raw), DeadLettered)
    out = receive(rec.state, read(TOPICS.incidents, encode(incident("i1", "SEV1", node="n2", ts=60.0))), 60.0)
    assert not isinstance(out, str) and of_type(out, "recovery_planned")
    assert estimate_mtbf(rec.state, 60.0) < float("inf")


def test_a_job_with_a_nan_throughput_is_dead_lettered_and_sev1_plans_still_validate() -> None:
    rec = Recorder()
    rec.started(now=1.0)
    job = json.loads(encode(submitted(job="other", nodes=("n4",), throughput={1: 123.0})))
    raw = json.dumps(job).replace('"1": 123.0', '"1": NaN').encode()
    assert b"NaN" in raw
    assert isinstance(read(TOPICS.jobs, raw), DeadLettered)
    out = receive(rec.state, read(TOPICS.incidents, encode(incident("i1", "SEV1", node="n2", ts=60.0))), 60.0)
    assert not isinstance(out, str) and of_type(out, "recovery_planned")
