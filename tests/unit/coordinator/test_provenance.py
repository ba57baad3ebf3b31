"""What the coordinator folds: each record signed by who may write it (the pure decision of
provenance.py). Jobs and an operator's node events need an operator key; an ack the key of its
own node; a command and every decision on `recovery` the coordinator's own key; each signed for
this deployment. Insecure (no trust) folds everything."""

from __future__ import annotations

import pytest

from trainmedic.bus.message import Record
from trainmedic.recovery.coordinator.provenance import (
    JOB_FRESHNESS_S,
    Trust,
    impersonates,
    skewed,
    stale,
    unverified,
)
from trainmedic.recovery.signing import SigningKey, TrustedKeys, Unverified, generate
from trainmedic.schemas import (
    Command,
    CommandAcked,
    Incident,
    JobSpec,
    JobStopRequested,
    JobSubmitted,
    NodeJoined,
    NodeLeaving,
    RanksFinished,
    encode,
)
from trainmedic.schemas.nodes import NodeCordoned, NodeDrained, NodeReadmitted, NodeUncordoned
from trainmedic.schemas.recovery import (
    JobEnded,
    RecoveryCompleted,
    RecoveryFailed,
    RecoveryPlanned,
    RecoverySkipped,
)
from trainmedic.schemas.topics import Topics

COORDINATOR, OPERATOR, N1, N2, STRANGER = (generate() for _ in range(5))
TRUST = Trust.of({"coordinator": TrustedKeys.of(COORDINATOR.private.public_key()),
                  "operator": TrustedKeys.of(OPERATOR.private.public_key()),
                  "node:n1": TrustedKeys.of(N1.private.public_key()),
                  "node:n2": TrustedKeys.of(N2.private.public_key())})
EVIL = JobSubmitted(ts=1.0, job=JobSpec(id="x", nodes=("n3",), throughput={1: 1.0},
                                        command=("sh", "-c", "id")))
COMMAND = Command(ts=1.0, node="n1", id="c1", job="j", generation=0, action="stop")
ACK = CommandAcked(ts=2.0, node="n1", command_id="c1", job="j", generation=0, status="failed")


def record(event, key: SigningKey | None = None, raw: bytes | None = None) -> Record:
    if key is not None:
        event = key.sign(event)
    return Record("t", 0, 0, None, event, raw if raw is not None else encode(event))


def kind(event, key=None, raw=None) -> str | None:
    why = unverified(record(event, key, raw), TRUST)
    return None if why is None else why.kind


@pytest.mark.parametrize("event", [EVIL, JobStopRequested(ts=1.0, job="x"), NodeCordoned(ts=1.0, node="n1"),
                                   NodeDrained(ts=1.0, node="n1"), NodeUncordoned(ts=1.0, node="n1")])
def test_jobs_and_node_events_need_an_operator_key(event):
    assert kind(event, OPERATOR) is None
    assert kind(event) == "unsigned"
    assert kind(event, STRANGER) == "unknown_key"
    for other in (COORDINATOR, N1):  # the coordinator's or a node's key is no operator's
        assert kind(event, other) == "unknown_key"
    assert kind(event, SigningKey(OPERATOR.key_id, STRANGER.private)) == "bad_signature"


def test_a_job_changed_after_signing_is_a_bad_signature_and_the_reason_says_it_is_not_started():
    signed = OPERATOR.sign(EVIL)
    tampered = encode(signed).replace(b'"n3"', b'"n4"')
    why = unverified(record(signed, raw=tampered), TRUST)
    assert why.kind == "bad_signature" and "job submission not signed by a trusted operator key" in str(why)


def test_an_ack_needs_the_key_of_its_own_node():
    assert kind(ACK, N1) is None
    assert kind(ACK) == "unsigned"
    assert kind(ACK, OPERATOR) == "unknown_key" and kind(ACK, COORDINATOR) == "unknown_key"
    why = unverified(record(ACK, N2), TRUST)  # n2's key answering for n1
    assert why.kind == "wrong_node" and "an ack from n1 signed by the key of node n2" in str(why)
    assert kind(ACK.model_copy(update={"node": "n2"}), N2) is None


@pytest.mark.parametrize("report", [RanksFinished(ts=2.0, node="n1", job="j", generation=0, ranks=(0, 1)),
                                    NodeJoined(ts=2.0, node="n1")])
def test_a_node_report_needs_the_key_of_its_own_node(report):
    assert kind(report, N1) is None
    assert kind(report) == "unsigned" and kind(report, OPERATOR) == "unknown_key"
    why = unverified(record(report, N2), TRUST)  # n2's key saying n1's ranks finished
    assert why.kind == "wrong_node" and f"{report.type} from n1 signed by the key of node n2" in str(why)


def test_commands_need_the_coordinators_own_key():
    assert kind(COMMAND, COORDINATOR) is None
    assert kind(COMMAND, OPERATOR) == "unknown_key" and kind(COMMAND) == "unsigned"


def test_insecure_folds_everything_and_other_records_are_not_checked_here():
    for event in (EVIL, ACK, COMMAND, NodeCordoned(ts=1.0, node="n1")):
        assert unverified(record(event), None) is None
    assert unverified(record(NodeReadmitted(ts=1.0, node="n1", incident_id="i")), TRUST) is None


def test_a_node_key_belongs_to_one_node():
    assert TRUST.owners == {N1.key_id: "n1", N2.key_id: "n2"}
    assert set(TRUST.nodes.keys) == {N1.key_id, N2.key_id} and set(TRUST.operators.keys) == {OPERATOR.key_id}


def test_an_unknown_key_names_a_few_trusted_ids_not_a_clusters_worth():
    many = TrustedKeys.of(*(generate().private.public_key() for _ in range(100)))
    why = many.check(encode(STRANGER.sign(ACK)), "ack")
    assert why.startswith(f"unknown key id '{STRANGER.key_id}': trusted are ")
    assert why.endswith(" and 92 more")


def _incident(id_: str, category: str, topic: str) -> Record:
    event = Incident(ts=1.0, id=id_, status="resolved", category=category, severity="SEV1",
                     action="alert", job="j", first_ts=1.0)
    return Record(topic, 0, 0, None, event, encode(event))


@pytest.mark.parametrize(("id_", "category"), [("esc-0123", "start_failed"), ("esc-0123", "gpu_lost"),
                                               ("mass-0123", "mass_failure"), ("x-1", "recovery_failed"),
                                               ("x-2", "node_suspect"), ("x-3", "health_check_failed")])
def test_an_incident_posing_as_the_coordinators_own_is_refused_on_incidents_only(id_, category):
    why = impersonates(_incident(id_, category, "p.incidents"), "p.incidents")
    assert why is not None and why.kind == "misplaced" and "belongs on the recovery topic" in str(why)
    assert impersonates(_incident(id_, category, "p.recovery"), "p.incidents") is None


def test_the_detectors_own_incidents_pass():
    assert impersonates(_incident("gpu_lost-cfe2181532b5", "gpu_lost", "p.incidents"), "p.incidents") is None


@pytest.mark.parametrize("event", [NodeJoined(ts=1_000_000.0, node="n1"),
                                   NodeLeaving(ts=1_000_000.0, node="n1", reason="shutdown")])
def test_a_node_report_whose_clock_is_far_from_the_brokers_is_not_folded(event) -> None:
    at_broker = Record("t", 0, 0, None, event, encode(event), timestamp_ms=1_000_000_000 + 30_000)
    assert skewed(at_broker) is None  # 30 s apart: a clock that is merely off
    ahead = Record("t", 0, 0, None, event, encode(event), timestamp_ms=1_000_000_000 - 86_400_000)
    why = skewed(ahead)
    assert why is not None and why.kind == "clock_skew" and "86400 s ahead of the broker's time" in str(why)
    behind = Record("t", 0, 0, None, event, encode(event), timestamp_ms=1_000_000_000 + 600_000)
    assert skewed(behind) is not None and "behind" in str(skewed(behind))
    assert skewed(Record("t", 0, 0, None, event, encode(event))) is None  # no broker time: nothing to compare


def test_the_acks_topic_carries_the_brokers_clock() -> None:
    from trainmedic.schemas.topics import BY_SUFFIX

    assert BY_SUFFIX["acks"].config()["message.timestamp.type"] == "LogAppendTime"


HERE = Topics("prod.")
DECISIONS = [
    RecoveryPlanned(ts=1.0, plan_id="p", job="j", kind="reconfigure", generation=1, nodes=("n3",),
                    previous=("n1",), isolated={"n1": "i"}),
    RecoverySkipped(ts=1.0, incident_id="i", reason="r", isolated={"n1": "i", "n2": "i"}),
    RecoveryCompleted(ts=1.0, plan_id="p", job="j", generation=1),
    RecoveryFailed(ts=1.0, plan_id="p", job="j", generation=1, reason="r"),
    JobEnded(ts=1.0, job="j", state="stopped"),
    NodeReadmitted(ts=1.0, node="n1", incident_id="i"),
    Incident(ts=1.0, id="esc-1", status="open", category="start_failed", severity="SEV1",
             action="reconfigure", node="n1", first_ts=1.0),
]


def here(event, key: SigningKey | None = None, deployment: str | None = "prod.",
         topic: str = "prod.recovery") -> Unverified | None:
    """Why the coordinator of prefix prod. does not fold `event`, signed by `key` for `deployment`
    and read from `topic`."""
    if deployment is not None:
        event = event.model_copy(update={"deployment": deployment})
    if key is not None:
        event = key.sign(event)
    return unverified(Record(topic, 0, 0, None, event, encode(event)), TRUST, HERE)


@pytest.mark.parametrize("decision", DECISIONS, ids=lambda e: e.type)
def test_every_decision_on_recovery_needs_the_coordinators_own_key_for_this_deployment(decision):
    assert here(decision, COORDINATOR) is None
    assert here(decision).kind == "unsigned"  # the broker's super user can write it; it folds nothing
    assert here(decision, OPERATOR).kind == "unknown_key" and here(decision, N1).kind == "unknown_key"
    assert here(decision, COORDINATOR, "test.").kind == "other_deployment"
    assert here(decision, COORDINATOR, None).kind == "other_deployment"  # signed before deployments
    assert str(here(decision)) == (f"{decision.type} not signed by this coordinator, not folded: unsigned: "
                                   "the decision carries no signature")


def test_the_detectors_incidents_are_not_signed_and_not_taken_for_decisions():
    incident = Incident(ts=1.0, id="gpu_lost-1", status="open", category="gpu_lost", severity="SEV1",
                        action="reconfigure", node="n1", first_ts=1.0)
    assert here(incident, deployment=None, topic="prod.incidents") is None


@pytest.mark.parametrize(("event", "key"), [(EVIL, OPERATOR), (NodeDrained(ts=1.0, node="n1"), OPERATOR),
                                            (ACK, N1), (COMMAND, COORDINATOR)])
def test_a_record_signed_for_another_deployment_is_not_folded(event, key):
    assert here(event, key, topic="prod.x") is None
    why = here(event, key, "test.", topic="prod.x")
    assert why.kind == "other_deployment" and "signed for deployment 'test.', this is 'prod.'" in str(why)
    assert here(event, key, None, topic="prod.x").kind == "other_deployment"


def test_a_job_far_from_the_brokers_time_of_its_record_is_stale():
    def at(ts: float, broker_s: float | None) -> Unverified | None:
        event = JobSubmitted(ts=ts, job=EVIL.job)
        return stale(Record("t", 0, 0, None, event, encode(event),
                            None if broker_s is None else int(broker_s * 1000)))

    assert at(1_000_000.0, 1_000_000.0 + JOB_FRESHNESS_S - 1) is None
    why = at(1_000_000.0, 1_000_000.0 + 2 * 3600)
    assert why.kind == "stale" and "x says 1000000, 7200 s older than the broker's time" in str(why)
    assert at(1_000_000.0 + 2 * 3600, 1_000_000.0).kind == "stale"  # dated hours ahead: held for later
    assert at(1.0, None) is None  # no broker time: nothing to compare
    assert stale(record(ACK)) is None  # only job submissions
