"""`trainmedic job` against a real broker and a real coordinator: a job whose every node reports its
ranks finished succeeds (a report signed by another node's key does not count), `job stop` stops
a running job's ranks and it ends stopped, and `job submit` refuses what it can see is wrong."""

from __future__ import annotations

import threading
import time

import pytest

from tests.integration.test_coordinator import SPEC, Keys, ack_all, env, keys, leading, read, step_until
from trainmedic.bus.producer import EventProducer
from trainmedic.bus.settings import KafkaSettings
from trainmedic.cli import main
from trainmedic.recovery.coordinator.core import JobState
from trainmedic.schemas import CommandAcked, Incident, RanksFinished

pytestmark = pytest.mark.kafka
__all__ = ["env", "keys"]  # the fixtures, shared with test_coordinator


def job(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["job", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def report(kafka: KafkaSettings, event, key) -> None:
    with EventProducer(kafka) as producer:
        producer.send(kafka.topics.acks, key.sign(event), key=event.node)


def running(kafka: KafkaSettings, keys: Keys, tmp_path, capsys, spec: str = SPEC):
    (tmp_path / "job.yaml").write_text(spec)
    (tmp_path / "train.py").write_text("")
    assert job(capsys, "submit", str(tmp_path / "job.yaml"), "--allow-unknown-nodes", "--wait", "0")[0] == 0
    service = leading(kafka, sign=keys.coordinator.sign, trust=keys.trust)
    service.start()
    step_until(service, lambda: len(service.state.commands) == 3)
    ack_all(kafka, read(kafka, "commands"), keys)
    step_until(service, lambda: service.state.jobs["llm"].state is JobState.RUNNING)
    return service


def test_a_job_whose_ranks_all_finished_succeeds(env: KafkaSettings, keys: Keys, tmp_path, capsys) -> None:
    kafka = env
    service = running(kafka, keys, tmp_path, capsys)
    for node in ("n1", "n2"):
        done = RanksFinished(ts=time.time(), node=node, job="llm", generation=0, ranks=())
        report(kafka, done, keys.nodes[node])
    forged = RanksFinished(ts=time.time(), node="n3", job="llm", generation=0, ranks=(4, 5))
    report(kafka, forged, keys.nodes["n1"])  # n1's key speaking for n3: dead-lettered
    step_until(service, lambda: read(kafka, "dlq"))
    [refused] = read(kafka, "dlq")
    assert "wrong node: a ranks_finished from n3 signed by the key of node n1" in refused.reason
    assert service.state.jobs["llm"].state is JobState.RUNNING
    report(kafka, forged, keys.nodes["n3"])
    step_until(service, lambda: service.state.jobs["llm"].state is JobState.SUCCEEDED)
    [ended] = [e for e in read(kafka, "recovery") if e.type == "job_ended"]
    assert (ended.job, ended.state, ended.generation) == ("llm", "succeeded", 0)
    assert not any(c.action == "stop" for c in read(kafka, "commands"))  # ranks that exited need no stop
    code, out, _ = job(capsys, "list")
    assert code == 0 and out.splitlines()[1].split() == ["llm", "succeeded", "0", "0"]
    code, _, err = job(capsys, "stop", "llm")
    assert code == 2 and "job llm already ended (succeeded" in err and "nothing to stop" in err
    service.close()


def test_job_stop_stops_the_ranks_and_the_job_ends_stopped(env: KafkaSettings, keys: Keys, tmp_path,
                                                            capsys) -> None:
    kafka = env
    service = running(kafka, keys, tmp_path, capsys)
    code, out, _ = job(capsys, "stop", "llm", "--reason", "wrong learning rate")
    assert code == 0 and "stop of job llm requested (running)" in out and "n1 n2 n3" in out
    step_until(service, lambda: len(service.state.commands) == 6)
    stops = [c for c in read(kafka, "commands") if c.generation == 1]
    assert sorted((c.node, c.action) for c in stops) == [("n1", "stop"), ("n2", "stop"), ("n3", "stop")]
    assert service.state.jobs["llm"].state is JobState.STOPPING
    ack_all(kafka, stops, keys)
    step_until(service, lambda: service.state.jobs["llm"].state is JobState.STOPPED)
    [ended] = [e for e in read(kafka, "recovery") if e.type == "job_ended"]
    assert ended.state == "stopped" and "wrong learning rate" in ended.reason
    assert service.state.job_on("n1") is None
    code, out, _ = job(capsys, "list")
    assert code == 0 and out.splitlines()[1].split()[:2] == ["llm", "stopped"]
    code, _, err = job(capsys, "stop", "llm")
    assert code == 2 and "job llm already ended (stopped" in err
    code, _, err = job(capsys, "stop", "nope")
    assert code == 2 and err == (
        "trainmedic job: no job nope in the log (jobs: llm); `trainmedic job list` shows them\n")
    service.close()


def test_submit_refuses_a_taken_id_unknown_nodes_and_a_command_that_cannot_run(env: KafkaSettings, keys: Keys,
                                                                                 tmp_path, capsys) -> None:
    kafka = env
    spec = tmp_path / "job.yaml"
    (tmp_path / "train.py").write_text("")

    def submit(text: str, *flags: str) -> tuple[int, str]:
        spec.write_text(text)
        code, _, err = job(capsys, "submit", str(spec), *flags)
        assert code == 0 or (err.startswith("trainmedic job: ") and err.count("\n") == 1), err
        return code, err

    code, err = submit(SPEC)
    assert code == 2 and "nodes n1, n2, n3 never heard from" in err and "--allow-unknown-nodes" in err
    for node in ("n1", "n2", "n3"):  # each node's executor reports (an ack, signed by its node)
        report(kafka, CommandAcked(ts=time.time(), node=node, command_id="c-0", job="old", generation=0,
                                   status="refused"), keys.nodes[node])
    code, err = submit(SPEC.replace("train.py", "trian.py"))
    assert code == 2 and f"script 'trian.py' does not exist under workdir {tmp_path}" in err
    assert submit(SPEC.replace("train.py", "trian.py"), "--no-local-check")[0] == 0  # heard from now
    code, err = submit(SPEC)
    assert code == 2 and "a job with id llm is already in the log (submitted)" in err
    assert "pick a new id" in err
    code, err = submit(SPEC.replace("id: llm", "id: llm-2") + "env: {RANK: '3'}\n")
    assert code == 2 and "env sets RANK: the executor sets it for each rank" in err
    [submitted] = [e for e in read(kafka, "jobs")]
    assert submitted.job.workdir == str(tmp_path) and submitted.job.command == ("python", "trian.py")


def test_a_rejected_job_is_answered_to_submit_and_listed_rejected(env: KafkaSettings, keys: Keys, tmp_path,
                                                                   capsys) -> None:
    """Issue 33: the coordinator's rejection was only dead-lettered; `job list` showed the job
    `submitted` forever and `job submit --allow-unknown-nodes` returned before any answer."""
    service = leading(env, sign=keys.coordinator.sign, trust=keys.trust)
    service.start()
    stop = threading.Event()
    coordinating = threading.Thread(target=lambda: [service.step(0.2) for _ in iter(stop.is_set, True)])
    coordinating.start()
    try:
        (tmp_path / "job.yaml").write_text(SPEC.replace("n3]", "n9]"))  # n9: not in the cluster
        (tmp_path / "train.py").write_text("")
        code, out, _ = job(capsys, "submit", str(tmp_path / "job.yaml"), "--allow-unknown-nodes")
    finally:
        stop.set()
        coordinating.join()
    assert code == 1 and "job llm rejected by the coordinator:" in out and "n9 not in the cluster" in out
    code, out, _ = job(capsys, "list")
    assert code == 0 and out.splitlines()[1].split()[:2] == ["llm", "rejected"]
    service.close()


def test_a_job_the_coordinator_gave_up_on_ends_failed_with_its_incidents_resolved(
        env: KafkaSettings, keys: Keys, tmp_path, capsys) -> None:
    service = running(env, keys, tmp_path, capsys, SPEC + "restart: {max_restarts: 0}\n")
    with EventProducer(env) as producer:  # the detector's SEV2 for the job
        producer.send(env.topics.incidents, Incident(
            ts=time.time(), id="crash-1", status="open", category="process_exit", severity="SEV2",
            action="restart", job="llm", node="n2", first_ts=time.time() - 1), key="llm")
    step_until(service, lambda: service.state.jobs["llm"].end_reason)
    service.close()
    recovery = read(env, "recovery")
    assert [(e.state, e.generation) for e in recovery if e.type == "job_ended"] == [("failed", 0)]
    [resolved] = [e for e in recovery if e.type == "incident" and e.status == "resolved"]
    assert resolved.id == "crash-1" and "resolved: job llm ended failed: " in resolved.evidence[-1]
    code, out, _ = job(capsys, "list")
    assert out.splitlines()[1].split()[:2] == ["llm", "failed"]
